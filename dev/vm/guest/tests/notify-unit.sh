# Guest test: the packaged unit for real. packaging/systemd/kubelet.service is Type=notify, so
# `systemctl start` returns only after READY=1; with `WatchdogSec=` the kubelet pings the watchdog
# while its health checks pass, and a kubelet that stops answering (SIGSTOP) is killed by
# systemd's watchdog and restarted (Restart=always from the unit).
# shellcheck shell=bash
. /mnt/share/guest/lib.sh
set -u
start_containerd systemd
install_kubelet
# The unit's own Restart=always stays: the watchdog's kill must be followed by a restart.
standalone_unit WatchdogSec=12 RestartSec=1 < <(standalone_config systemd)
start_kubelet_unit
expect "kubelet.service Type" notify "$(systemctl show kubelet -p Type --value)"
expect "kubelet.service ActiveState after start" active "$(systemctl show kubelet -p ActiveState --value)"
pid=$(systemctl show kubelet -p MainPID --value)
[[ $(readlink /proc/$pid/exe) == /usr/bin/rkubelet ]] || fail "MainPID $pid is $(readlink /proc/$pid/exe), not /usr/bin/rkubelet"
# The watchdog: pinged (WatchdogTimestamp advances), never fired over three periods.
wd1=$(systemctl show kubelet -p WatchdogTimestampMonotonic --value)
sleep 36
wd2=$(systemctl show kubelet -p WatchdogTimestampMonotonic --value)
((wd2 > wd1)) || fail "the watchdog timestamp did not advance ($wd1 -> $wd2): no WATCHDOG=1"
expect "NRestarts after 36 s of watchdog" 0 "$(systemctl show kubelet -p NRestarts --value)"
expect "MainPID unchanged" "$pid" "$(systemctl show kubelet -p MainPID --value)"
# A hung kubelet is killed by the watchdog and restarted by the unit.
kill -STOP "$pid"
restarted() { [[ $(systemctl show kubelet -p NRestarts --value) -ge 1 && $(systemctl show kubelet -p ActiveState --value) == active ]]; }
wait_for 90 "watchdog kills the stopped kubelet and the unit restarts it" restarted
journalctl -u kubelet --no-pager | grep -i watchdog | tail -n 3
new=$(systemctl show kubelet -p MainPID --value)
[[ $new != "$pid" ]] || fail "MainPID is still $pid after the watchdog fired"
log "ok: watchdog fired; kubelet restarted as pid $new"
