#!/bin/sh
# One round of use of bench/desktop's aged desktop, run as root in the guest through the guest agent by
# bench/desktop/age.py. In the session of the user `desk` (DISPLAY :0) it opens PAGES tabs of the aging page in the
# running Firefox (they stay open: a used browser's tabs), starts a second Firefox on its own profile with two more
# pages, a terminal running a memory churn, the file manager and the application finder, reads FILES random files
# of /usr into the page cache meanwhile, and a second memory churn; holds HOLD seconds; closes every program it
# started; on odd rounds drops the clean page cache (what it read goes back to the free lists, scattered).
#
# usage: age-round.sh DIR ROUND PAGES FILES CHURN_MIB HOLD_S
#        age-round.sh --open-counters   (the counter page opened again, in front, in the running Firefox)
set -u
user=desk
uid=$(id -u "$user") gid=$(id -g "$user")
log=/dev/null

as_user() {  # starts "$@" in the user's session in the background; prints its pid (setpriv and env exec it)
  setpriv --reuid="$uid" --regid="$gid" --init-groups env HOME=/home/$user USER=$user LOGNAME=$user DISPLAY=:0 \
    XAUTHORITY=/home/$user/.Xauthority DBUS_SESSION_BUS_ADDRESS=unix:path=/run/user/$uid/bus \
    XDG_RUNTIME_DIR=/run/user/$uid "$@" </dev/null >>"$log" 2>&1 &
  echo $!
}

if [ "$1" = --open-counters ]; then
  # The running Firefox opens the counter page in a new tab in front and raises its window; the remote command
  # exits once it has handed the URL over (waited for: a guest-exec that returns first may take it with it).
  setpriv --reuid="$uid" --regid="$gid" --init-groups env HOME=/home/$user USER=$user LOGNAME=$user DISPLAY=:0 \
    XAUTHORITY=/home/$user/.Xauthority DBUS_SESSION_BUS_ADDRESS=unix:path=/run/user/$uid/bus \
    XDG_RUNTIME_DIR=/run/user/$uid timeout 120 firefox-esr --new-tab file:///usr/share/halite/counters.html
  exit $?
fi
dir=$1 round=$2 pages=$3 files=$4 churn=$5 hold=$6
log=$dir/apps.log
echo "round $round: $(date +%T)" >>"$log"

i=0
while [ "$i" -lt "$pages" ]; do
  # The running Firefox (the counter page's) opens the tab; this remote command exits at once.
  p=$(as_user timeout 120 firefox-esr --new-tab \
      "file://$dir/page.html?seed=r$round-t$i&rows=$((1000 + (round * 7 + i * 13) % 5 * 500))")
  while kill -0 "$p" 2>/dev/null; do sleep 1; done  # not our child (started in a subshell): poll
  sleep 3
  i=$((i + 1))
done

profile=$dir/ff-profile-$round
mkdir -p "$profile" && chown "$uid:$gid" "$profile"
pids="$(as_user firefox-esr --no-remote --profile "$profile" "file://$dir/page.html?seed=x$round-a&rows=3000" \
        "file://$dir/page.html?seed=x$round-b&rows=1500")"
pids="$pids $(as_user xfce4-terminal --disable-server -x python3 "$dir/churn.py" "$churn" "$hold" "t$round")"
pids="$pids $(as_user thunar "$dir")"
pids="$pids $(as_user xfce4-appfinder)"
python3 "$dir/churn.py" "$churn" 5 "c$round" &
churn_pid=$!
find /usr -xdev -type f -size -4M 2>/dev/null | shuf -n "$files" \
  | tr '\n' '\0' | xargs -0 cat >/dev/null 2>&1
wait "$churn_pid"
sleep "$hold"

for p in $pids; do kill "$p" 2>/dev/null; done
sleep 2
for p in $pids; do kill -9 "$p" 2>/dev/null; done
as_user thunar --quit >/dev/null  # a Thunar daemon of the session may own the window
rm -rf "$profile"
if [ $((round % 2)) -eq 1 ]; then
  sync
  echo 1 >/proc/sys/vm/drop_caches
fi
echo "round $round done: $(date +%T)" >>"$log"
