# dev/vm/guest/lib.sh: what the guest tests share (sourced by main.sh and every test).
#
# Owns:     the guest node's set-up: its network (a dummy interface with the node IP), the CNI
#           and containerd configuration, the kubelet's unit (packaging/systemd/kubelet.service
#           plus a drop-in), and reset_node, which returns the guest to a clean node between tests.
# Receives: the share at /mnt/share (binaries, images, packaging).
# Emits:    helpers: log, fail, skip, wait_for, kubelet and pod queries, cgroup v2 arithmetic.
# shellcheck shell=bash

S=/mnt/share
OUT=$S/out
NODE=rkubelet-vm
NODE_IP=10.0.2.15
MANIFESTS=/etc/kubernetes/manifests
RO=http://127.0.0.1:10255
CGROOT=/sys/fs/cgroup
# A standalone kubelet has no API server to ask, so (as upstream, whose v1beta1 defaults are
# webhook authentication and authorization) its config turns both off.
STANDALONE_AUTH='authentication:
  webhook:
    enabled: false
authorization:
  mode: AlwaysAllow'

say() { echo "[guest $(date -u +%T)] $*" >/dev/console; }
log() { echo "$(date -u +%T) $*"; }
# fail MSG: the test fails with MSG (main.sh shows the last FAIL: line in the summary).
fail() {
	echo "FAIL: $*"
	debug_dump
	exit 1
}
skip() {
	echo "SKIP: $*"
	exit 77
}

debug_dump() {
	echo "--- debug: kubelet unit"
	systemctl status kubelet --no-pager -l 2>&1 | tail -n 20 || true
	echo "--- debug: /pods"
	curl -s --max-time 5 "$RO/pods" | jq -c '.items[]? | {name: .metadata.name, phase: .status.phase, cs: .status.containerStatuses}' 2>&1 | head -n 20 || true
	echo "--- debug: kubelet journal (last 40 lines)"
	journalctl -u kubelet --no-pager -n 40 2>&1 || true
}

# wait_for SECS WHAT CMD...: run CMD every second until it succeeds; fail after SECS.
wait_for() {
	local secs=$1 what=$2 t0=$SECONDS
	shift 2
	until "$@" >/dev/null 2>&1; do
		((SECONDS - t0 < secs)) || fail "timed out after ${secs}s waiting for: $what"
		sleep 1
	done
	log "ok after $((SECONDS - t0))s: $what"
}

# expect WHAT WANT GOT
expect() {
	if [[ $2 != "$3" ]]; then
		fail "$1: expected '$2', got '$3'"
	fi
	log "ok: $1 = $3"
}

# ---------------------------------------------------------------------------------------------
# The node

node_network() {
	ip link set lo up
	ip link add dummy0 type dummy 2>/dev/null || true
	ip addr add "$NODE_IP/24" dev dummy0 2>/dev/null || true
	ip link set dummy0 up
	ip route add default via 10.0.2.2 dev dummy0 2>/dev/null || true
	mkdir -p /etc/cni/net.d
	cat >/etc/cni/net.d/10-rkubelet.conflist <<'EOF'
{
  "cniVersion": "1.0.0",
  "name": "rkubelet-vm",
  "plugins": [
    {"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": true, "hairpinMode": true,
     "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.88.0.0/16"}]],
              "routes": [{"dst": "0.0.0.0/0"}]}},
    {"type": "portmap", "capabilities": {"portMappings": true}},
    {"type": "loopback"}
  ]
}
EOF
}

# start_containerd systemd|cgroupfs: containerd with runc's matching cgroup manager, and the
# dev images (pause is the sandbox image; Debian's containerd would default to pause:3.6).
start_containerd() {
	local systemd_cgroup=false
	[[ $1 == systemd ]] && systemd_cgroup=true
	mkdir -p /etc/containerd
	cat >/etc/containerd/config.toml <<EOF
version = 2
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "registry.k8s.io/pause:3.10"
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
      SystemdCgroup = $systemd_cgroup
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "/etc/cni/net.d"
EOF
	systemctl restart containerd || fail "containerd did not start: $(journalctl -u containerd -n 20 --no-pager)"
	wait_for 60 "containerd answers" ctr version
	local tar
	for tar in pause busybox; do
		ctr -n k8s.io images import "$S/images/$tar.tar" >/dev/null || fail "ctr images import $tar.tar failed"
	done
	log "containerd $(containerd --version | awk '{print $3}') up, SystemdCgroup = $systemd_cgroup"
}

# install_kubelet: the binary as /usr/bin/rkubelet (and /usr/bin/kubelet, as the package's
# alternative does) and packaging/systemd/kubelet.service (Type=notify) as the unit.
install_kubelet() {
	install -m 0755 "$S/bin/rkubelet" /usr/bin/rkubelet
	ln -sf rkubelet /usr/bin/kubelet
	install -m 0644 "$S/packaging/systemd/kubelet.service" /etc/systemd/system/kubelet.service
	mkdir -p /etc/systemd/system/kubelet.service.d "$MANIFESTS" /var/lib/kubelet
}

# standalone_config [DRIVER [EXTRA-YAML]]: the KubeletConfiguration of a standalone test kubelet
# (static pods from $MANIFESTS, the read-only port for the checks), EXTRA-YAML appended.
standalone_config() {
	cat <<YAML
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: ${1:-systemd}
staticPodPath: $MANIFESTS
fileCheckFrequency: 2s
readOnlyPort: 10255
$STANDALONE_AUTH
${2:-}
YAML
}

# standalone_unit [SERVICE-LINE...]: /var/lib/kubelet/config.yaml (stdin) and a drop-in running
# the kubelet with it and no kubeconfig; the lines (default `Restart=no`, so a crash shows) end
# the drop-in's [Service] section.
standalone_unit() {
	mkdir -p /etc/systemd/system/kubelet.service.d /var/lib/kubelet "$MANIFESTS"
	cat >/var/lib/kubelet/config.yaml
	{
		printf '[Service]\nExecStart=\n'
		printf 'ExecStart=/usr/bin/kubelet --config=/var/lib/kubelet/config.yaml --container-runtime-endpoint=unix:///run/containerd/containerd.sock --hostname-override=%s --node-ip=%s\n' "$NODE" "$NODE_IP"
		if (($#)); then printf '%s\n' "$@"; else echo Restart=no; fi
	} >/etc/systemd/system/kubelet.service.d/20-guest.conf
}

# start_kubelet_standalone: install the kubelet, standalone_unit (config on stdin), start it.
# `systemctl start` returns when READY=1 arrived.
start_kubelet_standalone() {
	install_kubelet
	standalone_unit
	start_kubelet_unit
}

start_kubelet_unit() {
	systemctl daemon-reload
	local t0=$SECONDS
	timeout 300 systemctl start kubelet || fail "systemctl start kubelet failed (Type=notify: no READY=1?)"
	log "kubelet.service active (READY=1 after $((SECONDS - t0))s)"
}

# reset_node: stop the kubelet and containerd and remove everything they made, so the next test
# starts on a clean node.
reset_node() {
	systemctl stop kubelet fake-apiserver 2>/dev/null
	systemctl reset-failed kubelet 2>/dev/null
	rm -rf /etc/systemd/system/kubelet.service.d /etc/systemd/system/kubelet.service "$MANIFESTS" \
		/etc/kubernetes /etc/default/kubelet "$API_CREDS"
	if dpkg-query -W rkubelet >/dev/null 2>&1; then dpkg --purge rkubelet >/dev/null 2>&1; fi
	rm -f /usr/bin/kubelet /usr/bin/rkubelet
	systemctl stop containerd 2>/dev/null
	pkill -9 -f containerd-shim 2>/dev/null
	sleep 1
	local m
	for m in $(awk '$2 ~ /^\/(run\/containerd|var\/lib\/kubelet|var\/lib\/containerd|run\/netns)/ { print $2 }' /proc/mounts | sort -r); do
		umount -l "$m" 2>/dev/null
	done
	rm -rf /var/lib/kubelet /var/lib/containerd /run/containerd /var/log/pods /var/log/containers /var/lib/cni
	# cgroups: the systemd driver's slices, the cgroupfs driver's tree
	systemctl stop kubepods.slice 2>/dev/null
	if [[ -d $CGROOT/kubepods ]]; then
		find "$CGROOT/kubepods" -depth -type d -exec rmdir {} + 2>/dev/null
	fi
	ip link del cni0 2>/dev/null
	systemctl daemon-reload
	return 0
}

# ---------------------------------------------------------------------------------------------
# Pods through the read-only port (standalone mode)

pods_json() { curl -sf --max-time 10 "$RO/pods"; }
# pod_field NAME JQ: JQ on the pod whose name is NAME-<node> (a static pod's mirror name).
pod_field() {
	pods_json | jq -r --arg n "$1-$NODE" ".items[] | select(.metadata.name == \$n) | $2"
}
pod_uid() { pod_field "$1" .metadata.uid; }
pod_running() { [[ $(pod_field "$1" .status.phase) == Running ]]; }
pod_gone() { [[ -z $(pod_field "$1" .metadata.uid) ]]; }

# static_pod NAME QOS-RESOURCES-JSON [COMMAND-JSON]: write a manifest for a busybox pod with one
# container `c`.
static_pod() {
	local name=$1 resources=$2 cmd=${3:-'["sleep","3600"]'}
	mkdir -p "$MANIFESTS"
	# Written aside and renamed in (the kubelet ignores dot files), so it never reads half a file.
	cat >"$MANIFESTS/.$name.json.tmp" <<EOF
{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "$name", "namespace": "default"},
 "spec": {"terminationGracePeriodSeconds": 2, "restartPolicy": "Never",
  "containers": [{"name": "c", "image": "docker.io/library/busybox:latest",
   "imagePullPolicy": "IfNotPresent", "command": $cmd, "resources": $resources}]}}
EOF
	mv -f "$MANIFESTS/.$name.json.tmp" "$MANIFESTS/$name.json"
}

# ---------------------------------------------------------------------------------------------
# cgroup v2 arithmetic, as upstream (MilliCPUToShares, runc's shares → weight)

shares_of_millis() {
	local m=$1 s
	((m == 0)) && {
		echo 2
		return
	}
	s=$((m * 1024 / 1000))
	((s < 2)) && s=2
	((s > 262144)) && s=262144
	echo "$s"
}
weight_of_millis() {
	local s
	s=$(shares_of_millis "$1")
	echo $((1 + ((s - 2) * 9999) / 262142))
}

# ---------------------------------------------------------------------------------------------
# API mode: the fake API server in the guest, the kubelet as kubeadm runs it

API=https://127.0.0.1:6443
API_CREDS=/run/fake-api

# acurl ARGS...: curl to the API server with the admin credentials of its kubeconfig.
acurl() {
	curl --cacert "$API_CREDS/ca.crt" --cert "$API_CREDS/admin.crt" --key "$API_CREDS/admin.key" "$@"
}

# kubeconfig_field KEY: a base64 field of /etc/kubernetes/kubelet.conf, decoded.
kubeconfig_field() { awk -v k="$1:" '$1 == k { print $2 }' /etc/kubernetes/kubelet.conf | base64 -d; }

# start_fake_apiserver: fake-apiserver.service (HTTPS on 127.0.0.1:6443, client certificates),
# which writes an admin kubeconfig to /etc/kubernetes/kubelet.conf: a client certificate, as
# the kubelet requires of a kubeconfig when a bootstrap kubeconfig is configured (upstream
# treats one without a certificate as invalid and bootstraps instead).
start_fake_apiserver() {
	cat >/etc/systemd/system/fake-apiserver.service <<UNIT
[Unit]
Description=fake API server (guest test)
[Service]
ExecStart=$S/bin/fake-apiserver --port 6443 --write-kubeconfig /etc/kubernetes/kubelet.conf
UNIT
	rm -f /etc/kubernetes/kubelet.conf
	systemctl daemon-reload
	systemctl start fake-apiserver
	wait_for 60 "the fake API server wrote its kubeconfig" test -s /etc/kubernetes/kubelet.conf
	mkdir -p "$API_CREDS"
	kubeconfig_field certificate-authority-data >"$API_CREDS/ca.crt"
	kubeconfig_field client-certificate-data >"$API_CREDS/admin.crt"
	kubeconfig_field client-key-data >"$API_CREDS/admin.key"
	wait_for 60 "the fake API server answers" acurl -sf "$API/api/v1/namespaces"
}

# start_kubelet_kubeadm: /var/lib/kubelet/config.yaml (stdin) and the kubelet run exactly by
# kubeadm's files: the unit, 10-kubeadm.conf, kubeadm-flags.env and /etc/default/kubelet.
start_kubelet_kubeadm() {
	install_kubelet
	cat >/var/lib/kubelet/config.yaml
	install -m 0644 "$S/packaging/systemd/10-kubeadm.conf" /etc/systemd/system/kubelet.service.d/10-kubeadm.conf
	echo 'KUBELET_KUBEADM_ARGS="--container-runtime-endpoint=unix:///run/containerd/containerd.sock"' >/var/lib/kubelet/kubeadm-flags.env
	echo "KUBELET_EXTRA_ARGS=--hostname-override=$NODE --node-ip=$NODE_IP" >/etc/default/kubelet
	printf '[Service]\nRestart=no\n' >/etc/systemd/system/kubelet.service.d/20-guest.conf
	start_kubelet_unit
}

node_ready() {
	acurl -sf "$API/api/v1/nodes/$NODE" | jq -e '.status.conditions[] | select(.type == "Ready" and .status == "True")'
}

# api_pod NAME POD-EXTRA-JSON SCRIPT [RESOURCES-JSON [CONTAINER-EXTRA-JSON]]: a busybox pod bound
# to this node, its container `c` running `sh -c SCRIPT`; the extras are merged into the pod spec
# and the container.
api_pod() {
	local name=$1 extra=$2 script=$3 resources=${4:-'{}'} cextra=${5:-'{}'}
	jq -n --arg n "$name" --arg node "$NODE" --argjson extra "$extra" --arg s "$script" \
		--argjson r "$resources" --argjson ce "$cextra" '{
	  apiVersion: "v1", kind: "Pod", metadata: {name: $n, namespace: "default"},
	  spec: ({nodeName: $node,
	    containers: [({name: "c", image: "docker.io/library/busybox:latest",
	      imagePullPolicy: "IfNotPresent", command: ["sh", "-c", $s], resources: $r} + $ce)]} + $extra)}' |
		acurl -sf -X POST -H 'Content-Type: application/json' --data-binary @- \
			"$API/api/v1/namespaces/default/pods" >/dev/null || fail "creating pod $name failed"
}
api_pod_field() { acurl -sf "$API/api/v1/namespaces/default/pods/$1" | jq -r "$2"; }
api_running() { [[ $(api_pod_field "$1" .status.phase) == Running ]]; }

# The shutdown test's budget per priority group (tests/shutdown.sh configures it,
# shutdown-verdict.sh judges against it).
SHUTDOWN_BUDGET=8
