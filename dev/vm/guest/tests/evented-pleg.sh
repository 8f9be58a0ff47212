# Guest test (Debian 13 flavour: containerd 1.7 serves CRI GetContainerEvents): the EventedPLEG
# gate against a real event stream. With events flowing the fallback relist runs only every
# 300 s, so a container killed behind the kubelet's back and seen within seconds was seen through
# its event. The same kill with the gate off (relist every second) gives the comparison figure.
# shellcheck shell=bash
. /mnt/share/guest/lib.sh
set -u
[[ $(cat "$S/flavour") == trixie ]] || skip "needs containerd 1.7 (dev/vm.sh test --flavour trixie)"
start_containerd systemd

# run_once GATE: start the kubelet, run a pod, kill its container's process; sets START (manifest
# to Running) and EXIT (kill to the terminated status), in seconds.
run_once() {
	local gate=$1 t0 t1 t2 pid
	start_kubelet_standalone < <(standalone_config systemd "featureGates:
  EventedPLEG: $gate")
	t0=$(date +%s.%N)
	static_pod "pleg-$gate" '{}' '["sh", "-c", "exec sleep 3600"]'
	until pod_running "pleg-$gate"; do
		sleep 0.2
		awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { exit !(b - a > 240) }' && fail "pleg-$gate not Running after 240s (EventedPLEG=$gate)"
	done
	t1=$(date +%s.%N)
	# The container's own process, from its scope in the pod's slice (BestEffort).
	local uid
	uid=$(pod_uid "pleg-$gate")
	# (The sandbox's pause process has a scope there too.)
	pid=
	for p in $(cat "$CGROOT"/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod"${uid//-/_}".slice/cri-containerd-*.scope/cgroup.procs 2>/dev/null); do
		[[ $(cat "/proc/$p/comm" 2>/dev/null) == sleep ]] && pid=$p
	done
	[[ -n $pid ]] || fail "no sleep process in pleg-$gate's container scopes"
	kill -9 "$pid"
	local t_kill
	t_kill=$(date +%s.%N)
	until [[ $(pod_field "pleg-$gate" '.status.containerStatuses[0].state.terminated.exitCode // empty') == 137 ]]; do
		sleep 0.2
		awk -v a="$t_kill" -v b="$(date +%s.%N)" 'BEGIN { exit !(b - a > 60) }' && fail "the kill was not seen within 60s (EventedPLEG=$gate)"
	done
	t2=$(date +%s.%N)
	START=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }')
	EXIT=$(awk -v k="$t_kill" -v c="$t2" 'BEGIN { printf "%.2f", c - k }')
	rm -f "$MANIFESTS/pleg-$gate.json"
	wait_for 120 "pleg-$gate gone" pod_gone "pleg-$gate"
	systemctl stop kubelet
}

run_once true
start_ev=$START exit_ev=$EXIT
journalctl -u kubelet --no-pager | grep -q "Evented PLEG: consuming container events from the runtime" ||
	fail "the kubelet did not report consuming container events"
if journalctl -u kubelet --no-pager | grep -q "does not serve GetContainerEvents"; then
	fail "the kubelet fell back to relisting: containerd $(containerd --version | awk '{print $3}') did not serve events"
fi
awk -v e="$exit_ev" 'BEGIN { exit !(e < 30) }' || fail "exit seen after ${exit_ev}s with events (the fallback relist is 300 s)"
run_once false
start_re=$START exit_re=$EXIT
log "pod start to Running: ${start_ev}s with events, ${start_re}s with relist"
log "container kill to status: ${exit_ev}s with events, ${exit_re}s with relist"
echo "evented-pleg: start ${start_ev}s/${exit_ev}s (events) vs ${start_re}s/${exit_re}s (relist)" >>"$OUT/figures"
