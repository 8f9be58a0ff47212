# dev/vm/guest/qos.sh: the QoS cgroup test, run with DRIVER=systemd (tests/systemd-qos.sh) or
# DRIVER=cgroupfs (tests/cgroupfs-qos.sh) on the guest's pure cgroup v2 hierarchy.
#
# Owns:     nothing beyond the test's pods (static pods qos-*).
# Receives: DRIVER.
# Emits:    FAIL: lines on the first mismatch; exit 0 when every check held.
#
# Checks, against the real systemd and the real cgroup v2 files: the QoS tree (kubepods,
# burstable, besteffort) and a pod cgroup per pod with upstream's cpu.weight, cpu.max,
# memory.max and pids.max; node allocatable on kubepods; the burstable cgroup's weight following
# its pods' CPU requests as pods come and go; the containers inside their pod's cgroup;
# /stats/summary and /metrics/cadvisor reading the v2 files; pod cgroups removed after deletion.
# shellcheck shell=bash
. /mnt/share/guest/lib.sh
set -u

[[ $(stat -fc %T $CGROOT) == cgroup2fs ]] || fail "the guest's /sys/fs/cgroup is $(stat -fc %T $CGROOT), not cgroup2fs"
[[ $(ps -p 1 -o comm=) == systemd ]] || fail "PID 1 is $(ps -p 1 -o comm=), not systemd"

start_containerd "$DRIVER"
start_kubelet_standalone < <(standalone_config "$DRIVER" 'podPidsLimit: 1024
systemReserved:
  memory: 256Mi')

# The cgroup directory of a QoS class / pod, for this driver.
qos_dir() {
	case $DRIVER/$1 in
	systemd/guaranteed) echo "$CGROOT/kubepods.slice" ;;
	systemd/*) echo "$CGROOT/kubepods.slice/kubepods-$1.slice" ;;
	cgroupfs/guaranteed) echo "$CGROOT/kubepods" ;;
	cgroupfs/*) echo "$CGROOT/kubepods/$1" ;;
	esac
}
pod_dir() {
	local qos=$1 uid=$2
	case $DRIVER/$qos in
	systemd/guaranteed) echo "$(qos_dir guaranteed)/kubepods-pod${uid//-/_}.slice" ;;
	systemd/*) echo "$(qos_dir "$qos")/kubepods-$qos-pod${uid//-/_}.slice" ;;
	cgroupfs/*) echo "$(qos_dir "$qos")/pod$uid" ;;
	esac
}

static_pod qos-guaranteed '{"requests": {"cpu": "200m", "memory": "64Mi"}, "limits": {"cpu": "200m", "memory": "64Mi"}}'
static_pod qos-burstable '{"requests": {"cpu": "100m", "memory": "32Mi"}, "limits": {"cpu": "500m", "memory": "128Mi"}}'
static_pod qos-besteffort '{}'
for p in qos-guaranteed qos-burstable qos-besteffort; do
	wait_for 240 "$p Running" pod_running "$p"
done

# --- node allocatable on kubepods
root=$(qos_dir guaranteed)
mem_total=$(($(awk '/^MemTotal:/ { print $2 }' /proc/meminfo) * 1024))
expect "kubepods memory.max (capacity - systemReserved)" $((mem_total - 256 * 1024 * 1024)) "$(cat "$root/memory.max")"
expect "kubepods pids.max (kernel.pid_max, no pid reservation)" "$(cat /proc/sys/kernel/pid_max)" "$(cat "$root/pids.max")"
expect "kubepods cpu.weight ($(nproc) CPUs)" "$(weight_of_millis $(($(nproc) * 1000)))" "$(cat "$root/cpu.weight")"
if [[ $DRIVER == systemd ]]; then
	for u in kubepods.slice kubepods-burstable.slice kubepods-besteffort.slice; do
		expect "systemctl is-active $u" active "$(systemctl is-active "$u")"
	done
fi

# --- each pod's cgroup
declare -A UID_OF
for qos in guaranteed burstable besteffort; do
	UID_OF[$qos]=$(pod_uid "qos-$qos")
	[[ -n ${UID_OF[$qos]} ]] || fail "no uid for qos-$qos in /pods"
	d=$(pod_dir "$qos" "${UID_OF[$qos]}")
	[[ -d $d ]] || fail "pod cgroup $d of qos-$qos missing; kubepods has: $(find "$root" -maxdepth 2 -type d | tr '\n' ' ')"
	expect "qos-$qos pids.max" 1024 "$(cat "$d/pids.max")"
	case $qos in
	guaranteed)
		expect "qos-guaranteed cpu.weight" "$(weight_of_millis 200)" "$(cat "$d/cpu.weight")"
		expect "qos-guaranteed cpu.max" "20000 100000" "$(cat "$d/cpu.max")"
		expect "qos-guaranteed memory.max" 67108864 "$(cat "$d/memory.max")"
		;;
	burstable)
		expect "qos-burstable cpu.weight" "$(weight_of_millis 100)" "$(cat "$d/cpu.weight")"
		expect "qos-burstable cpu.max" "50000 100000" "$(cat "$d/cpu.max")"
		expect "qos-burstable memory.max" 134217728 "$(cat "$d/memory.max")"
		;;
	besteffort)
		expect "qos-besteffort cpu.weight" 1 "$(cat "$d/cpu.weight")"
		expect "qos-besteffort cpu.max" "max 100000" "$(cat "$d/cpu.max")"
		expect "qos-besteffort memory.max" max "$(cat "$d/memory.max")"
		;;
	esac
	# The container runs inside the pod's cgroup (a cri-containerd-<id>.scope under the systemd
	# driver, a directory named by the container ID under cgroupfs), with its memory limit.
	pid=$(pgrep -f '^sleep 3600' | while read -r p; do grep -q "${UID_OF[$qos]//-/_}\|${UID_OF[$qos]}" /proc/$p/cgroup && echo "$p"; done | head -n1)
	[[ -n $pid ]] || fail "no 'sleep 3600' process in qos-$qos's cgroup"
	cg=$CGROOT$(cut -d: -f3 </proc/$pid/cgroup)
	[[ $cg == "$d"/* ]] || fail "qos-$qos's container runs in $cg, not below $d"
	[[ $DRIVER != systemd || $cg == */cri-containerd-*.scope ]] || fail "qos-$qos's container cgroup $cg is not a cri-containerd-<id>.scope"
	log "ok: qos-$qos's container runs in $cg"
done
expect "kubepods-burstable cpu.weight (one 100m pod)" "$(weight_of_millis 100)" "$(cat "$(qos_dir burstable)/cpu.weight")"
expect "besteffort cpu.weight" 1 "$(cat "$(qos_dir besteffort)/cpu.weight")"

# --- the burstable QoS cgroup follows its pods' requests
static_pod qos-burstable2 '{"requests": {"cpu": "300m"}}'
wait_for 240 "qos-burstable2 Running" pod_running qos-burstable2
weight_is() { [[ $(cat "$(qos_dir burstable)/cpu.weight") == "$1" ]]; }
wait_for 120 "burstable cpu.weight = weight(400m) = $(weight_of_millis 400)" weight_is "$(weight_of_millis 400)"
uid2=$(pod_uid qos-burstable2)
d2=$(pod_dir burstable "$uid2")
rm -f "$MANIFESTS/qos-burstable2.json"
wait_for 120 "qos-burstable2 gone from /pods" pod_gone qos-burstable2
wait_for 120 "burstable cpu.weight back to weight(100m)" weight_is "$(weight_of_millis 100)"
no_dir() { [[ ! -d $1 ]]; }
wait_for 180 "qos-burstable2's pod cgroup removed" no_dir "$d2"
if [[ $DRIVER == systemd ]]; then
	unit=$(basename "$d2")
	unit_gone() { ! systemctl list-units --all --no-legend "$1" | grep -q .; }
	wait_for 60 "unit $unit gone" unit_gone "$unit"
fi

# --- /stats/summary and /metrics/cadvisor read the v2 files
summary=$(curl -sf --max-time 30 "$RO/stats/summary") || fail "GET /stats/summary failed"
for qos in guaranteed burstable besteffort; do
	ws=$(jq -r --arg n "qos-$qos-$NODE" '.pods[] | select(.podRef.name == $n) | .memory.workingSetBytes // 0' <<<"$summary")
	cpu=$(jq -r --arg n "qos-$qos-$NODE" '.pods[] | select(.podRef.name == $n) | .cpu.usageCoreNanoSeconds // 0' <<<"$summary")
	((ws > 0)) || fail "/stats/summary: qos-$qos memory.workingSetBytes is '$ws'"
	((cpu > 0)) || fail "/stats/summary: qos-$qos cpu.usageCoreNanoSeconds is '$cpu'"
	log "ok: /stats/summary qos-$qos workingSet=$ws cpu=$cpu"
done
avail=$(jq -r '.node.memory.availableBytes // 0' <<<"$summary")
((avail > 0)) || fail "/stats/summary: node memory.availableBytes is '$avail'"
cadvisor=$(curl -sf --max-time 30 "$RO/metrics/cadvisor") || fail "GET /metrics/cadvisor failed"
for qos in guaranteed burstable besteffort; do
	grep -E "^container_memory_working_set_bytes\{.*container=\"c\".*pod=\"qos-$qos-$NODE\"" <<<"$cadvisor" >/dev/null ||
		fail "/metrics/cadvisor has no container_memory_working_set_bytes for qos-$qos's container"
done
log "ok: /metrics/cadvisor has every container's working set"

# --- deletion removes every pod cgroup
rm -f "$MANIFESTS"/qos-*.json
for qos in guaranteed burstable besteffort; do
	wait_for 120 "qos-$qos gone from /pods" pod_gone "qos-$qos"
	wait_for 180 "qos-$qos's pod cgroup removed" no_dir "$(pod_dir "$qos" "${UID_OF[$qos]}")"
done
[[ $(systemctl is-active kubelet) == active ]] || fail "kubelet.service is $(systemctl is-active kubelet) at the end"
log "all QoS checks passed with cgroupDriver: $DRIVER"
