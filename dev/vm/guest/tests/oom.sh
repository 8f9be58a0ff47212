# Guest test: a container that outgrows its memory limit is killed by the kernel's OOM killer in
# its cgroup v2 scope and reported OOMKilled (exit 137) from the runtime's status, as upstream.
# shellcheck shell=bash
. /mnt/share/guest/lib.sh
set -u
start_containerd systemd
start_kubelet_standalone < <(standalone_config systemd)
static_pod oom-hog '{"requests": {"memory": "32Mi"}, "limits": {"memory": "32Mi"}}' \
	'["sh", "-c", "a=xxxxxxxxxxxxxxxx; while true; do a=$a$a; done"]'
terminated() { [[ -n $(pod_field oom-hog '.status.containerStatuses[0].state.terminated.reason // empty') ]]; }
wait_for 240 "oom-hog's container terminated" terminated
expect "oom-hog terminated reason" OOMKilled "$(pod_field oom-hog .status.containerStatuses[0].state.terminated.reason)"
expect "oom-hog exit code" 137 "$(pod_field oom-hog .status.containerStatuses[0].state.terminated.exitCode)"
failed() { [[ $(pod_field oom-hog .status.phase) == Failed ]]; }
wait_for 60 "oom-hog phase Failed (restartPolicy Never)" failed
uid=$(pod_uid oom-hog)
events=$CGROOT/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod${uid//-/_}.slice/memory.events
[[ -f $events ]] || fail "pod cgroup $events missing"
kills=$(awk '$1 == "oom_kill" { print $2 }' "$events")
((kills >= 1)) || fail "the kernel counted no OOM kill in the pod's cgroup ($events: $(tr '\n' ' ' <"$events"))"
log "ok: the kernel counted $kills OOM kill(s) in the pod's cgroup"
rm -f "$MANIFESTS/oom-hog.json"
wait_for 120 "oom-hog gone" pod_gone oom-hog
