# Guest test: graceful node shutdown with the real systemd-logind, in API mode as kubeadm runs the
# kubelet (packaging/systemd/kubelet.service + 10-kubeadm.conf, kubeadm-flags.env and
# /etc/default/kubelet), against the fake API server running in the guest.
#
# Owns:     the units fake-apiserver.service and shutdown-verdict.service (whose ExecStop,
#           tests/../shutdown-verdict.sh, judges the shutdown and writes this test's result).
# Receives: nothing.
# Emits:    FAIL: lines before the power-off; afterwards the verdict writes `PASS|FAIL shutdown`.
#
# Before the power-off: logind's InhibitDelayMaxSec (5 s by default) raised by the kubelet's
# drop-in to the total grace period, and the kubelet's delay lock listed by logind. Then
# `systemctl poweroff`: logind signals PrepareForShutdown and waits for the lock; the verdict
# unit is stopped first once the lock is gone (it is ordered after the kubelet and the API
# server, so both still run) and checks the pods' final statuses in the API.
# shellcheck shell=bash
. /mnt/share/guest/lib.sh
set -u

[[ $(ps -p 1 -o comm=) == systemd ]] || fail "PID 1 is not systemd"
systemctl is-active systemd-logind >/dev/null || systemctl start systemd-logind || fail "systemd-logind does not run"
delay_usec() { busctl get-property org.freedesktop.login1 /org/freedesktop/login1 org.freedesktop.login1.Manager InhibitDelayMaxUSec | awk '{print $2}'; }
log "logind InhibitDelayMaxUSec before the kubelet: $(delay_usec)"

start_containerd systemd

cat >/etc/systemd/system/shutdown-verdict.service <<UNIT
[Unit]
Description=graceful shutdown verdict (guest test)
After=kubelet.service fake-apiserver.service containerd.service
RequiresMountsFor=$S
[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/bin/true
ExecStop=/bin/bash $S/guest/shutdown-verdict.sh
TimeoutStopSec=120
StandardOutput=journal+console
StandardError=journal+console
UNIT
systemctl daemon-reload
start_fake_apiserver
start_kubelet_kubeadm <<YAML
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: systemd
readOnlyPort: 10255
shutdownGracePeriodByPodPriority:
- priority: 0
  shutdownGracePeriodSeconds: $SHUTDOWN_BUDGET
- priority: 1000
  shutdownGracePeriodSeconds: $SHUTDOWN_BUDGET
- priority: 2000000000
  shutdownGracePeriodSeconds: $SHUTDOWN_BUDGET
YAML

wait_for 180 "Node $NODE registered and Ready" node_ready

# logind's delay raised to the total grace period through the kubelet's drop-in
want=$((3 * SHUTDOWN_BUDGET * 1000000))
delay_ok() { [[ $(delay_usec) -ge $want ]]; }
wait_for 60 "logind InhibitDelayMaxUSec >= $want" delay_ok
[[ -f /etc/systemd/logind.conf.d/99-kubelet.conf ]] || fail "no /etc/systemd/logind.conf.d/99-kubelet.conf"
log "drop-in: $(tr '\n' ' ' </etc/systemd/logind.conf.d/99-kubelet.conf)"
lock_held() { systemd-inhibit --list --no-pager | grep -E 'shutdown.*delay' | grep -qi kubelet; }
wait_for 60 "logind lists the kubelet's delay lock" lock_held
systemd-inhibit --list --no-pager

# Three pods, one per priority group: "low" ignores SIGTERM (it is killed when its group's
# budget ends), the others exit on SIGTERM.
api_pod low '{"priority": 0, "terminationGracePeriodSeconds": 60}' "trap '' TERM; while true; do sleep 1; done"
api_pod mid '{"priority": 1000, "terminationGracePeriodSeconds": 60}' "trap 'exit 0' TERM; while true; do sleep 1; done"
api_pod critical '{"priority": 2000001000, "terminationGracePeriodSeconds": 60}' "trap 'exit 0' TERM; while true; do sleep 1; done"
for p in low mid critical; do wait_for 240 "pod $p Running in the API" api_running "$p"; done

systemctl start shutdown-verdict
date +%s.%N >"$OUT/shutdown.start"
log "systemctl poweroff (the verdict is written at shutdown)"
sync
systemctl poweroff --no-block
sleep infinity
