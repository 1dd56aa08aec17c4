#!/bin/sh
# /init of the libhalite test guest (busybox sh, PID 1). Installed as /init by scripts/build-guest.
#
# Kernel command line (read from /proc/cmdline):
#   hlt.workload=memcheck|memsim|redis|shell|idle|poweroff   what to run (default memcheck)
#   hlt.args=--mib,256                                 its arguments, comma-separated (no spaces)
#   hlt.virtio=1     load the virtio drivers (PCI, block, net, console) first: /dev/vda and eth0 appear, and every
#                    change of a NIC's MAC address is printed as "HLT-GUEST MAC eth0 52:54:00:..." (a clone's NIC
#                    comes back with a new one); hltagent answers on the guest agent port when the VM has one; the
#                    TPM's PCR 0 and each VM generation ID change are printed ("HLT-GUEST TPM ...", "HLT-GUEST
#                    VMGENID ...")
#   hlt.age=SECONDS  first age the guest's memory for SECONDS (memage: fragmented physical memory, as on a desktop
#                    that ran for days), then run the workload
#   hlt.age_args=--resident-pct,40   more memage options, comma-separated
# Prints "HLT-GUEST READY" on the console, runs the workload in the foreground with its output on the console,
# then prints "HLT-GUEST EXIT rc=N" and powers off (QEMU with -no-reboot then exits).
# redis (only in a guest built with scripts/build-guest --with-redis): loads the virtio-net modules, configures
# eth0 for QEMU user-mode networking (10.0.2.15/24, gateway 10.0.2.2) and runs redis-server on port 6379 with
# persistence off; hlt.args are extra redis-server options (e.g. --io-threads,1).

PATH=/bin:/sbin:/usr/bin:/usr/sbin
export PATH

/bin/busybox mkdir -p /proc /sys /dev /tmp /sbin /usr/bin /usr/sbin
/bin/busybox --install -s
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev 2>/dev/null || mdev -s

# Prefer the serial port itself; fall back to whatever console the kernel gave us.
for tty in /dev/ttyS0 /dev/console; do
  if [ -c "$tty" ] && (: >"$tty") 2>/dev/null; then
    exec <"$tty" >"$tty" 2>&1
    break
  fi
done

workload=memcheck
args=
virtio=0
age=
age_args=
set -f  # the command line is data: no globbing
for word in $(cat /proc/cmdline); do
  case "$word" in
    hlt.workload=*) workload=${word#hlt.workload=} ;;
    hlt.args=*) args=${word#hlt.args=} ;;
    hlt.virtio=1) virtio=1 ;;
    hlt.age=*) age=${word#hlt.age=} ;;
    hlt.age_args=*) age_args=${word#hlt.age_args=} ;;
  esac
done
old_ifs=$IFS
IFS=,
# shellcheck disable=SC2086  # split on commas on purpose
set -- $args
IFS=$old_ifs
set +f

virtio_loaded=0
load_virtio() {
  [ $virtio_loaded = 1 ] && return 0
  while read -r mod; do
    insmod "/lib/modules/hlt/$mod.ko" || return 1
  done </lib/modules/hlt/load-order
  virtio_loaded=1
  # Devices appear asynchronously after their drivers bind.
  n=0
  while [ ! -e /sys/class/net/eth0 ] && [ ! -e /sys/block/vda ] && [ $n -lt 100 ]; do sleep 0.05; n=$((n + 1)); done
  sleep 0.2
}

# Prints each NIC's MAC address whenever it changes (a hot-unplugged and replugged NIC included).
watch_macs() {
  seen=""
  while :; do
    now=""
    for dev in /sys/class/net/eth*; do
      [ -e "$dev/address" ] && now="$now ${dev##*/}=$(cat "$dev/address")"
    done
    if [ "$now" != "$seen" ]; then
      for pair in $now; do echo "HLT-GUEST MAC ${pair%%=*} ${pair#*=}"; done
      # Read afresh from the TPM: a clone's (whose NIC comes back with its new MAC) must hold the saved state.
      pcr=/sys/class/tpm/tpm0/pcr-sha256/0
      [ -r $pcr ] && echo "HLT-GUEST TPM pcr-sha256/0 $(cat $pcr)"
      seen=$now
    fi
    sleep 0.5
  done
}

run_redis() {
  [ -x /bin/redis-server ] || { echo "HLT-GUEST no redis-server in this initramfs (build-guest --with-redis)"; return 127; }
  load_virtio || return 1
  ifconfig lo 127.0.0.1 up
  # The NIC appears asynchronously after the driver binds.
  n=0
  while [ ! -e /sys/class/net/eth0 ] && [ $n -lt 100 ]; do sleep 0.05; n=$((n + 1)); done
  ifconfig eth0 10.0.2.15 netmask 255.255.255.0 up || return 1
  route add default gw 10.0.2.2
  echo "HLT-GUEST NET eth0=10.0.2.15"
  cat >/etc/redis.conf <<'CONF'
bind * -::*
protected-mode no
port 6379
daemonize no
logfile ""
dir /var/lib/redis
save ""
appendonly no
enable-debug-command yes
CONF
  /bin/redis-server /etc/redis.conf "$@"
}

# The guest agent (hltagent, a small one of ours) on the virtio-serial port org.qemu.guest_agent.0, when the VM has
# one; restarted if it exits.
run_agent() {
  n=0
  while [ $n -lt 20 ]; do
    grep -qx org.qemu.guest_agent.0 /sys/class/virtio-ports/*/name 2>/dev/null && break
    sleep 0.1
    n=$((n + 1))
  done
  grep -qx org.qemu.guest_agent.0 /sys/class/virtio-ports/*/name 2>/dev/null || return 0
  while :; do
    /bin/hltagent
    sleep 1
  done
}

# What a clone test reads from the guest besides the MAC lines (which also carry the TPM's PCR 0: the same value
# after a restore means the TPM kept the saved state): the kernel's note that the VM generation ID changed.
report_devices() {
  reseeds=0
  while :; do
    now=$(dmesg | grep -c "crng reseeded due to virtual machine fork")
    if [ "$now" != "$reseeds" ]; then
      echo "HLT-GUEST VMGENID crng reseeded due to virtual machine fork (count $now)"
      reseeds=$now
    fi
    sleep 0.5
  done
}

if [ $virtio = 1 ]; then
  load_virtio || echo "HLT-GUEST virtio drivers failed to load"
  watch_macs &
  run_agent &
  report_devices &
fi

# hlt.age=SECONDS: an aged guest (memage: processes allocating, touching and freeing memory, files written and
# deleted) so that the workload's memory is scattered over physical memory as on a desktop that ran for days.
# Its long-running processes stay (sleeping) while the workload runs; the kernel's clean caches are dropped after.
if [ -n "$age" ]; then
  set -f
  IFS=,
  # shellcheck disable=SC2086  # split on commas on purpose
  /bin/memage --seconds "$age" --drop-caches $age_args || echo "HLT-GUEST memage failed"
  IFS=$old_ifs
  set +f
fi

echo "HLT-GUEST READY workload=$workload args=$args"

rc=0
case "$workload" in
  memcheck) /bin/memcheck "$@" || rc=$? ;;
  memsim) /bin/memsim "$@" || rc=$? ;;
  redis) run_redis "$@" || rc=$? ;;
  shell) setsid cttyhack /bin/sh || rc=$? ;;
  idle) while :; do sleep 3600; done ;;
  poweroff) ;;
  *)
    echo "HLT-GUEST unknown workload '$workload'"
    rc=127
    ;;
esac

echo "HLT-GUEST EXIT rc=$rc"
sync
poweroff -f
# poweroff should not return; never let PID 1 exit (that panics the kernel).
while :; do sleep 3600; done
