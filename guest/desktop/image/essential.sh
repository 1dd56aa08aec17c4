#!/bin/sh
# mmdebstrap --essential-hook of scripts/build-desktop-guest: runs on the host once the essential packages are in
# ROOT and before the others (the kernel among them) are installed, so that the first initramfs is already built
# with the project's settings (rootfs/common/etc/initramfs-tools/).
# usage: essential.sh ROOT
set -eu
root=$1
here=$(dirname "$0")
cp -R "$here/rootfs/common/." "$root/"
