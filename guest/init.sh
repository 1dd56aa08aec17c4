#!/bin/sh
# /init of the libhalite test guest (busybox sh, PID 1). Installed as /init by scripts/build-guest.
#
# Kernel command line (read from /proc/cmdline):
#   hlt.workload=memcheck|memsim|shell|idle|poweroff   what to run (default memcheck)
#   hlt.args=--mib,256                                 its arguments, comma-separated (no spaces)
# Prints "HLT-GUEST READY" on the console, runs the workload in the foreground with its output on the console,
# then prints "HLT-GUEST EXIT rc=N" and powers off (QEMU with -no-reboot then exits).

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
set -f  # the command line is data: no globbing
for word in $(cat /proc/cmdline); do
  case "$word" in
    hlt.workload=*) workload=${word#hlt.workload=} ;;
    hlt.args=*) args=${word#hlt.args=} ;;
  esac
done
old_ifs=$IFS
IFS=,
# shellcheck disable=SC2086  # split on commas on purpose
set -- $args
IFS=$old_ifs
set +f

echo "HLT-GUEST READY workload=$workload args=$args"

rc=0
case "$workload" in
  memcheck) /bin/memcheck "$@" || rc=$? ;;
  memsim) /bin/memsim "$@" || rc=$? ;;
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
