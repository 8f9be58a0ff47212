# Guest test: eviction on real cgroup v2 memory pressure. The kubelet's memory.available comes
# from the real files; a threshold just below what the node has free is crossed when a BestEffort
# pod fills a memory-backed emptyDir, and that pod (not the Guaranteed bystander) is evicted with
# upstream's reason and message. (Static pods are critical and never evicted, as upstream, so
# the pods come from the API.)
# shellcheck shell=bash
. /mnt/share/guest/lib.sh
set -u
start_containerd systemd
start_fake_apiserver
config() {
	cat <<YAML
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: systemd
readOnlyPort: 10255
evictionPressureTransitionPeriod: 10s
evictionHard:
  memory.available: "$1"
YAML
}
# First run: what does the node have free?
start_kubelet_kubeadm < <(config 100Mi)
wait_for 180 "Node $NODE registered and Ready" node_ready
avail_now() { curl -sf "$RO/stats/summary" | jq -e '.node.memory.availableBytes > 0'; }
wait_for 60 "/stats/summary has node memory" avail_now
avail=$(curl -sf "$RO/stats/summary" | jq '.node.memory.availableBytes')
mem_total=$(($(awk '/^MemTotal:/ { print $2 }' /proc/meminfo) * 1024))
log "node memory.available $((avail >> 20)) MiB of $((mem_total >> 20)) MiB"
((mem_total > 1500 << 20)) || skip "the guest has $((mem_total >> 20)) MiB; the test needs 1500 MiB (RKUBELET_VM_MEM)"
((avail > 700 << 20)) || fail "only $((avail >> 20)) MiB of $((mem_total >> 20)) MiB available at the start"
threshold=$(((avail >> 20) - 250))
systemctl stop kubelet
config "${threshold}Mi" >/var/lib/kubelet/config.yaml
start_kubelet_unit
wait_for 180 "Node Ready again (threshold ${threshold}Mi)" node_ready
pressure() { acurl -sf "$API/api/v1/nodes/$NODE" | jq -r '.status.conditions[] | select(.type == "MemoryPressure") | .status'; }
expect "MemoryPressure before the hog" False "$(pressure)"

api_pod bystander '{}' "sleep 3600" '{"requests": {"cpu": "100m", "memory": "32Mi"}, "limits": {"cpu": "100m", "memory": "32Mi"}}'
wait_for 240 "bystander Running" api_running bystander
api_pod hog '{"volumes": [{"name": "m", "emptyDir": {"medium": "Memory"}}], "terminationGracePeriodSeconds": 1}' \
	"dd if=/dev/zero of=/m/fill bs=1M count=500 && sleep 3600" '{}' '{"volumeMounts": [{"name": "m", "mountPath": "/m"}]}'
under_pressure() { [[ $(pressure) == True ]]; }
wait_for 300 "Node MemoryPressure True" under_pressure
evicted() { [[ $(api_pod_field hog .status.reason) == Evicted ]]; }
wait_for 300 "hog evicted (reason Evicted)" evicted
expect "hog phase" Failed "$(api_pod_field hog .status.phase)"
msg=$(api_pod_field hog .status.message)
[[ $msg == "The node was low on resource: memory."* ]] || fail "hog's eviction message is '$msg'"
log "ok: hog message: $msg"
api_pod_field hog '.status.conditions[]? | select(.type == "DisruptionTarget")' | grep -q TerminationByKubelet ||
	fail "hog has no DisruptionTarget/TerminationByKubelet condition"
expect "bystander still Running" Running "$(api_pod_field bystander .status.phase)"
# The hog's memory is freed with its emptyDir; the pressure condition clears after the
# transition period.
no_pressure() { [[ $(pressure) == False ]]; }
wait_for 180 "MemoryPressure back to False" no_pressure
