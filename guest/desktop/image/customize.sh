#!/bin/sh
# mmdebstrap --customize-hook of scripts/build-desktop-guest: runs on the host once every package is installed in
# ROOT, and configures the guest (commands that must run inside it go through chroot).
# usage: customize.sh ROOT VARIANT ROOT_UUID
# Prints "customize: <what>" before each part, so that a failure names the part that failed.
set -eu
root=$1
variant=$2
root_uuid=$3
here=$(dirname "$0")
say() { echo "customize: $*"; }
in_guest() { chroot "$root" "$@"; }

say "host name, fstab"
echo "hlt-$variant" >"$root/etc/hostname"
printf '127.0.0.1\tlocalhost\n127.0.1.1\thlt-%s\n::1\t\tlocalhost ip6-localhost ip6-loopback\n' "$variant" >"$root/etc/hosts"
echo "UUID=$root_uuid / ext4 rw,errors=remount-ro 0 1" >"$root/etc/fstab"

# A test guest: root has no password, so that a human can log in on the serial console (ttyS0) to look around.
say "root without a password (serial console login)"
in_guest passwd -d root >/dev/null

say "systemd units"
in_guest systemctl enable --quiet systemd-networkd.service halite-guest-state.service
# Timers that would start work at random moments of a saved guest's life (package downloads, file system scrubs,
# TRIM, backups of the dpkg database): a benchmark or a test must not meet them after a restore.
in_guest systemctl mask --quiet apt-daily.timer apt-daily-upgrade.timer dpkg-db-backup.timer e2scrub_all.timer \
  fstrim.timer
# e2scrub_reap removes leftover LVM snapshots of e2scrub at every boot: there is no LVM here, and under TCG it
# costs as much CPU as the rest of the boot's units together.
in_guest systemctl disable --quiet e2scrub_reap.service

if [ "$variant" = desktop ]; then
  say "desktop: the shipped files (LightDM autologin, Xorg without blanking, Firefox on the counter page)"
  cp -R "$here/rootfs/desktop/." "$root/"
  say "desktop: the user desk, logged in automatically"
  in_guest useradd --create-home --shell /bin/bash --comment "libhalite desktop" --groups audio,video,users desk
  in_guest passwd -d desk >/dev/null
  in_guest systemctl set-default --quiet graphical.target
  [ -e "$root/etc/systemd/system/display-manager.service" ] || in_guest systemctl enable --quiet lightdm.service
else
  in_guest systemctl set-default --quiet multi-user.target
fi
say "done"
