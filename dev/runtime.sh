#!/usr/bin/env bash
# dev/runtime.sh: a project-local containerd (CRI) for rkubelet development, tests and CI.
#
# Owns:     everything under $RKUBELET_DEV_DIR (default /tmp/rkubelet-dev): containerd's
#           config/root/state/socket/log, the CNI config and IPAM data, the cached image tars;
#           plus the CNI bridge rkubelet0 and the iptables rules CNI made for our network.
# Receives: one command: up | down | env | status | purge | images (see usage below).
# Emits:    `up` prints the CRI endpoint (unix:///…/containerd.sock) as the LAST line of stdout;
#           `env` prints export lines for eval. All other chatter goes to stderr.
#
# Needs root on Debian 12 (installs missing packages with apt). Never touches a system-wide
# containerd (/run/containerd/containerd.sock) and does not need one.
set -euo pipefail

usage() {
	cat >&2 <<'EOF'
usage: dev/runtime.sh up|down|env|status|purge|images

  up      install missing packages, write config, build+import images, start containerd
          (idempotent); prints the CRI endpoint as the last line of stdout
  down    stop containerd, the pods it ran and an rkubelet started by dev/run.sh --detach;
          unmount, remove the CNI bridge and our CNI iptables rules (idempotent)
  env     print `export RKUBELET_CRI_ENDPOINT=… RKUBELET_DEV_DIR=…` for eval
  status  say whether containerd is running and list the images it has
  purge   down, then delete the whole dev dir (images are rebuilt on the next up)
  images  build the cached image tars only (no containerd); prints their directory last
          (dev/vm.sh imports them into the guest's containerd)

env: RKUBELET_DEV_DIR (default /tmp/rkubelet-dev), RKUBELET_POD_SUBNET (default 10.222.0.0/16),
     RKUBELET_UP_TIMEOUT (seconds to wait for containerd, default 60),
     RKUBELET_SYSTEMD_CGROUP=1 (runc's SystemdCgroup = true: containers become systemd scopes
       in the pod's slice; for an rkubelet with cgroupDriver: systemd on a host whose PID 1 is
       systemd — see docs/systemd-cgroups.md. Default 0: cgroupfs. A running containerd
       keeps its setting: `down` then `up` to switch.)
EOF
}

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
DIR=$(realpath -m "${RKUBELET_DEV_DIR:-/tmp/rkubelet-dev}")
SOCK=$DIR/containerd.sock
ENDPOINT=unix://$SOCK
CFG=$DIR/containerd.toml
LOG=$DIR/containerd.log
PIDFILE=$DIR/containerd.pid
RUNC_ROOT=$DIR/runc
REGISTRY_HOSTS_DIR=$DIR/certs.d
CNI_CONF_DIR=$DIR/cni/net.d
CNI_IPAM_DIR=$DIR/cni/ipam
IMG_DIR=$DIR/images
# The default dev dir gets bridge rkubelet0 / network rkubelet-dev / 10.222.0.0/16. Any other dev
# dir gets names and a /24 derived from its path, so two dev containerds on one host do not share
# (and tear down) each other's bridge, iptables rules or addresses.
if [[ $DIR == /tmp/rkubelet-dev ]]; then
	CNI_NETWORK=rkubelet-dev
	CNI_BRIDGE=rkubelet0
	POD_SUBNET=${RKUBELET_POD_SUBNET:-10.222.0.0/16}
else
	DIR_HASH=$(printf '%s' "$DIR" | sha256sum | cut -c1-6)
	CNI_NETWORK=rkubelet-$DIR_HASH
	CNI_BRIDGE=rkb$DIR_HASH
	POD_SUBNET=${RKUBELET_POD_SUBNET:-10.223.$((16#${DIR_HASH:0:2})).0/24}
fi
UP_TIMEOUT=${RKUBELET_UP_TIMEOUT:-60}
# runc's cgroup manager: systemd (cgroupDriver: systemd) or cgroupfs (the default).
case ${RKUBELET_SYSTEMD_CGROUP:-0} in
1 | true) SYSTEMD_CGROUP=true ;;
0 | false | "") SYSTEMD_CGROUP=false ;;
*)
	echo "dev/runtime.sh: RKUBELET_SYSTEMD_CGROUP must be 0 or 1, not ${RKUBELET_SYSTEMD_CGROUP}" >&2
	exit 2
	;;
esac
NS=k8s.io

# Images. The pause name matches the Go kubelet 1.33 default --pod-infra-container-image.
PAUSE_IMAGE=registry.k8s.io/pause:3.10
PAUSE_NAMES=("$PAUSE_IMAGE" registry.k8s.io/pause:3.9)
BUSYBOX_IMAGE=docker.io/library/busybox:latest
BUSYBOX_NAMES=("$BUSYBOX_IMAGE" docker.io/library/busybox:1.36)
# Bump when the way images are built changes, to force a rebuild of cached tars.
IMAGE_RECIPE=1

PACKAGES=(containerd runc containernetworking-plugins busybox-static gcc libc6-dev iptables
	protobuf-compiler python3 curl iproute2 util-linux
	openssl # client certificates in the HTTPS server tests
	dbus-daemon # private buses for the systemd cgroup driver and graceful node shutdown tests
	prometheus # promtool: the metrics tests check the /metrics text with it
	tmux) # `rkubelet get pods -w` is watched on a terminal screen (tests/it/ctl.rs)

log() { printf '[runtime.sh] %s\n' "$*" >&2; }
warn() { printf '[runtime.sh] WARNING: %s\n' "$*" >&2; }
die() {
	printf '[runtime.sh] ERROR: %s\n' "$*" >&2
	exit 1
}

ctr_() { timeout 30 ctr --address "$SOCK" "$@"; }

# Any command that fails unexpectedly (set -e) says where, instead of exiting silently.
on_err() {
	printf '[runtime.sh] ERROR: command failed (status %s) at line %s: %s\n' "$1" "$2" "$3" >&2
}
trap 'on_err "$?" "$LINENO" "$BASH_COMMAND"' ERR

# remove_socket PATH: remove a stale socket file; refuse anything else.
remove_socket() {
	if [[ -e $1 && ! -S $1 ]]; then
		die "$1 exists and is not a socket; remove it (or pick another RKUBELET_DEV_DIR)"
	fi
	rm -f "$1"
}

# ---------------------------------------------------------------------------------------------
# packages

ensure_packages() {
	local missing=() p
	if ! command -v dpkg-query >/dev/null; then
		die "dpkg-query not found: dev/runtime.sh supports Debian 12 (apt) only"
	fi
	for p in "${PACKAGES[@]}"; do
		if ! dpkg-query -W -f='${db:Status-Abbrev}' "$p" 2>/dev/null | grep -q '^ii'; then
			missing+=("$p")
		fi
	done
	if ((${#missing[@]} == 0)); then
		return 0
	fi
	log "installing missing packages: ${missing[*]}"
	export DEBIAN_FRONTEND=noninteractive
	local apt_opts=(-o DPkg::Lock::Timeout=300 -o Dpkg::Options::=--force-confdef
		-o Dpkg::Options::=--force-confold)
	apt-get "${apt_opts[@]}" update -qq >&2 || die "apt-get update failed"
	apt-get "${apt_opts[@]}" install -y -qq --no-install-recommends "${missing[@]}" >&2 ||
		die "apt-get install ${missing[*]} failed"
	# Debian starts the system containerd service on install where systemd runs; we do not
	# need it, and it does not clash with ours (different socket, root and state).
}

# ---------------------------------------------------------------------------------------------
# config files

# write_if_changed FILE: stdin becomes FILE's content, written atomically, only if different.
write_if_changed() {
	local file=$1 tmp
	tmp=$(mktemp "$file.XXXXXX")
	cat >"$tmp"
	if [[ -f $file ]] && cmp -s "$tmp" "$file"; then
		rm -f "$tmp"
		return 1
	fi
	chmod 0644 "$tmp"
	mv -f "$tmp" "$file"
	return 0
}

write_configs() {
	mkdir -p "$DIR" "$CNI_CONF_DIR" "$CNI_IPAM_DIR" "$IMG_DIR" "$RUNC_ROOT" "$REGISTRY_HOSTS_DIR"
	if ((${#SOCK} > 100)); then
		die "socket path $SOCK is ${#SOCK} chars; unix sockets allow ~107: use a shorter RKUBELET_DEV_DIR"
	fi
	if write_if_changed "$CFG" <<EOF; then
# Generated by dev/runtime.sh: containerd for rkubelet development. Do not edit; edit the script.
version = 2
root = "$DIR/root"
state = "$DIR/state"
oom_score = 0
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs"]

[grpc]
  address = "$SOCK"

[ttrpc]
  address = "$SOCK.ttrpc"

[plugins]
  [plugins."io.containerd.internal.v1.opt"]
    path = "$DIR/opt"

  [plugins."io.containerd.runtime.v1.linux"]
    runtime_root = "$DIR/runc-v1"

  [plugins."io.containerd.grpc.v1.cri"]
    sandbox_image = "$PAUSE_IMAGE"
    # Required on hosts without CAP_SYS_RESOURCE: runc cannot lower oom_score_adj there.
    restrict_oom_score_adj = true
    # Keep pod network namespaces out of /var/run/netns.
    netns_mounts_under_state_dir = true
    stream_server_address = "127.0.0.1"
    stream_server_port = "0"

    [plugins."io.containerd.grpc.v1.cri".cni]
      bin_dir = "/usr/lib/cni"
      conf_dir = "$CNI_CONF_DIR"
      max_conf_num = 1

    [plugins."io.containerd.grpc.v1.cri".containerd]
      snapshotter = "overlayfs"
      default_runtime_name = "runc"

      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"

        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
          Root = "$RUNC_ROOT"
          SystemdCgroup = $SYSTEMD_CGROUP

      # A second handler for the same runc, so RuntimeClass pass-through is tested for real.
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc-alt]
        runtime_type = "io.containerd.runc.v2"

        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc-alt.options]
          Root = "$RUNC_ROOT"
          SystemdCgroup = $SYSTEMD_CGROUP

    [plugins."io.containerd.grpc.v1.cri".registry]
      # hosts.toml per registry (e.g. the test registry on 127.0.0.1, plain HTTP); read per pull.
      config_path = "$REGISTRY_HOSTS_DIR"
EOF
		log "wrote $CFG"
	fi
	if write_if_changed "$CNI_CONF_DIR/10-rkubelet.conflist" <<EOF; then
{
  "cniVersion": "1.0.0",
  "name": "$CNI_NETWORK",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$CNI_BRIDGE",
      "isGateway": true,
      "ipMasq": true,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": "$POD_SUBNET"}]],
        "routes": [{"dst": "0.0.0.0/0"}],
        "dataDir": "$CNI_IPAM_DIR"
      }
    },
    {"type": "portmap", "capabilities": {"portMappings": true}},
    {"type": "loopback"}
  ]
}
EOF
		log "wrote $CNI_CONF_DIR/10-rkubelet.conflist"
	fi
}

# ---------------------------------------------------------------------------------------------
# images

# cache_key FILE...: a short hash of the recipe version and the given input files.
cache_key() {
	local f
	{
		echo "recipe=$IMAGE_RECIPE"
		for f in "$@"; do sha256sum <"$f"; done
	} | sha256sum | cut -c1-16
}

build_pause() {
	local src=$HERE/images/pause.c tar=$IMG_DIR/pause.tar key work name args=()
	key=$(cache_key "$src" "$HERE/images/mkimage.py")
	if [[ -f $tar && -f $tar.key && $(cat "$tar.key") == "$key" ]]; then
		return 0
	fi
	log "building pause image ($PAUSE_IMAGE)"
	work=$(mktemp -d "$IMG_DIR/pause-build.XXXXXX")
	mkdir -p "$work/rootfs"
	gcc -static -Os -s -Wall -Wextra -o "$work/rootfs/pause" "$src" >&2 ||
		die "gcc failed to build $src (is libc6-dev installed?)"
	chmod 0755 "$work/rootfs/pause"
	for name in "${PAUSE_NAMES[@]}"; do args+=(--name "$name"); done
	python3 "$HERE/images/mkimage.py" --rootfs "$work/rootfs" --out "$tar" "${args[@]}" \
		--entrypoint '["/pause"]' --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
		>"$tar.digest" || die "mkimage.py failed for the pause image"
	echo "$key" >"$tar.key"
	rm -rf "$work"
}

build_busybox() {
	local bb=/bin/busybox tar=$IMG_DIR/busybox.tar key work r applet name args=()
	[[ -x $bb ]] || die "$bb missing (package busybox-static)"
	key=$(cache_key "$bb" "$HERE/images/mkimage.py" "${BASH_SOURCE[0]}")
	if [[ -f $tar && -f $tar.key && $(cat "$tar.key") == "$key" ]]; then
		return 0
	fi
	log "building busybox image ($BUSYBOX_IMAGE) from $bb"
	work=$(mktemp -d "$IMG_DIR/busybox-build.XXXXXX")
	r=$work/rootfs
	mkdir -p "$r"/{bin,dev,etc,home,proc,root,sys,usr/bin,usr/sbin,sbin,var/www,var/spool/mail}
	mkdir "$r/tmp" && chmod 1777 "$r/tmp"
	chmod 0700 "$r/root"
	cp "$bb" "$r/bin/busybox"
	chmod 0755 "$r/bin/busybox"
	while read -r applet; do
		[[ -n $applet && $applet != busybox && $applet != */* ]] || continue
		ln -sf busybox "$r/bin/$applet"
	done < <("$bb" --list)
	[[ -L $r/bin/sh ]] || die "busybox --list did not include sh"
	cat >"$r/etc/passwd" <<'EOF'
root:x:0:0:root:/root:/bin/sh
nobody:x:65534:65534:nobody:/home:/bin/false
EOF
	cat >"$r/etc/group" <<'EOF'
root:x:0:
nogroup:x:65534:
nobody:x:65534:
EOF
	chmod 0644 "$r/etc/passwd" "$r/etc/group"
	for name in "${BUSYBOX_NAMES[@]}"; do args+=(--name "$name"); done
	python3 "$HERE/images/mkimage.py" --rootfs "$r" --out "$tar" "${args[@]}" \
		--cmd '["sh"]' --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
		>"$tar.digest" || die "mkimage.py failed for the busybox image"
	echo "$key" >"$tar.key"
	rm -rf "$work"
}

# image_digest NAME: the manifest digest containerd has for NAME in our namespace (or nothing).
image_digest() {
	ctr_ -n "$NS" images ls 2>/dev/null | awk -v n="$1" '$1 == n { print $3 }'
}

# import_image TAR NAME...: import TAR unless every NAME is there with the tar's digest.
import_image() {
	local tar=$1 want name have stale=0
	shift
	want=$(cat "$tar.digest")
	for name in "$@"; do
		have=$(image_digest "$name")
		[[ $have == "$want" ]] || stale=1
	done
	((stale)) || return 0
	log "importing $(basename "$tar") into namespace $NS as: $*"
	ctr_ -n "$NS" images import "$tar" >&2 || die "ctr images import $tar failed"
	for name in "$@"; do
		have=$(image_digest "$name")
		if [[ -z $have ]]; then
			die "image $name missing after importing $tar (ctr imports nothing silently when the index lacks io.containerd.image.name)"
		fi
		if [[ $have != "$want" ]]; then
			die "image $name has digest $have after import, expected $want"
		fi
	done
}

# ---------------------------------------------------------------------------------------------
# processes

# pid_matches PID WORD...: true if PID is alive and its argv contains every WORD as an element.
pid_matches() {
	local pid=$1 word args
	shift
	[[ -r /proc/$pid/cmdline ]] || return 1
	mapfile -d '' -t args <"/proc/$pid/cmdline" 2>/dev/null || return 1
	((${#args[@]} > 0)) || return 1
	for word in "$@"; do
		local found=0 a
		for a in "${args[@]}"; do
			if [[ $a == "$word" ]]; then
				found=1
				break
			fi
		done
		((found)) || return 1
	done
	return 0
}

# pids_matching WORD...: every PID whose argv contains every WORD.
pids_matching() {
	local d
	for d in /proc/[0-9]*; do
		pid_matches "${d#/proc/}" "$@" && echo "${d#/proc/}"
	done
	return 0
}

containerd_pid() {
	local pid
	if [[ -f $PIDFILE ]]; then
		pid=$(cat "$PIDFILE")
		if [[ $pid =~ ^[0-9]+$ ]] && pid_matches "$pid" --config "$CFG"; then
			echo "$pid"
			return 0
		fi
	fi
	# Fall back to a scan (PID file lost or stale).
	pid=$(pids_matching --config "$CFG" | head -n1)
	if [[ -n $pid ]] && [[ $(readlink "/proc/$pid/exe" 2>/dev/null) == */containerd ]]; then
		echo "$pid" >"$PIDFILE"
		echo "$pid"
		return 0
	fi
	return 1
}

# stop_pid PID NAME [GRACE_SECONDS]: SIGTERM, wait, then SIGKILL.
stop_pid() {
	local pid=$1 name=$2 grace=${3:-10} i
	kill -TERM "$pid" 2>/dev/null || return 0
	for ((i = 0; i < grace * 10; i++)); do
		kill -0 "$pid" 2>/dev/null || return 0
		sleep 0.1
	done
	warn "$name (pid $pid) did not exit after SIGTERM+${grace}s; sending SIGKILL"
	kill -KILL "$pid" 2>/dev/null || true
	for ((i = 0; i < 50; i++)); do
		kill -0 "$pid" 2>/dev/null || return 0
		sleep 0.1
	done
	warn "$name (pid $pid) still alive after SIGKILL"
}

log_tail() {
	if [[ -f $LOG ]]; then
		echo "---- last 40 lines of $LOG ----" >&2
		tail -n 40 "$LOG" >&2
		echo "----" >&2
	fi
}

cri_plugin_state() {
	# Prints ok / error / skip / (nothing) for the CRI plugin.
	ctr_ plugins ls 2>/dev/null |
		awk '$1 == "io.containerd.grpc.v1" && $2 == "cri" { print $NF }'
}

start_containerd() {
	local pid state deadline
	if pid=$(containerd_pid); then
		if [[ $(cri_plugin_state) == ok ]]; then
			log "containerd already running (pid $pid)"
			if [[ $CFG -nt $DIR/containerd.started ]]; then
				warn "$CFG changed since containerd started; run 'dev/runtime.sh down' then 'up' to apply it"
			fi
			return 0
		fi
		warn "containerd (pid $pid) is running but its CRI plugin is not ready; restarting it"
		stop_pid "$pid" containerd
	fi
	remove_socket "$SOCK"
	remove_socket "$SOCK.ttrpc"
	# ip_forward is switched on by the CNI bridge (isGateway); remember the original for `down`.
	if [[ ! -f $DIR/ip_forward.orig ]]; then
		cat /proc/sys/net/ipv4/ip_forward >"$DIR/ip_forward.orig" 2>/dev/null || true
	fi
	if [[ -f $LOG ]] && (($(stat -c %s "$LOG") > 50 * 1024 * 1024)); then
		mv -f "$LOG" "$LOG.old"
	fi
	echo "==== $(date -u +%FT%TZ) dev/runtime.sh up: starting containerd" >>"$LOG"
	# setsid + all fds redirected: containerd must outlive this script and must not hold the
	# caller's stdout (EP=$(dev/runtime.sh up) would hang) nor our lock (fd 9).
	setsid containerd --config "$CFG" </dev/null >>"$LOG" 2>&1 9>&- &
	local started=$!
	echo "$started" >"$PIDFILE"
	touch "$DIR/containerd.started"
	log "started containerd (pid $started), log $LOG; waiting for the CRI plugin"
	deadline=$((SECONDS + UP_TIMEOUT))
	while :; do
		# Probe the forked PID itself: until it has exec'd containerd its argv is still ours,
		# so an argv match would report a live process as gone.
		if ! kill -0 "$started" 2>/dev/null; then
			log_tail
			die "containerd exited during startup (see $LOG)"
		fi
		if [[ -S $SOCK ]]; then
			state=$(cri_plugin_state)
			case $state in
			ok)
				break
				;;
			error | skip)
				log_tail
				die "containerd's CRI plugin io.containerd.grpc.v1.cri is '$state' (see $LOG)"
				;;
			esac
		fi
		if ((SECONDS >= deadline)); then
			log_tail
			die "containerd did not answer with a loaded CRI plugin within ${UP_TIMEOUT}s (see $LOG)"
		fi
		sleep 0.2
	done
	log "containerd ready: $(ctr_ version 2>/dev/null | awk '/^Server:/ {s=1} s && /Version:/ {print $2; exit}')"
}

# ---------------------------------------------------------------------------------------------
# down helpers

stop_detached_rkubelet() {
	local pidfile=$DIR/rkubelet.pid pid
	[[ -f $pidfile ]] || return 0
	pid=$(cat "$pidfile")
	if [[ $pid =~ ^[0-9]+$ ]] && [[ $(readlink "/proc/$pid/exe" 2>/dev/null) == */rkubelet ]]; then
		log "stopping rkubelet started by dev/run.sh (pid $pid)"
		stop_pid "$pid" rkubelet 15
	fi
	rm -f "$pidfile"
}

# remove_containers: with containerd up, kill and delete every task and container it has.
remove_containers() {
	local ns id
	for ns in $(ctr_ namespaces ls -q 2>/dev/null); do
		for id in $(ctr_ -n "$ns" containers ls -q 2>/dev/null); do
			ctr_ -n "$ns" tasks kill -s SIGKILL "$id" >/dev/null 2>&1 || true
		done
		for id in $(ctr_ -n "$ns" containers ls -q 2>/dev/null); do
			ctr_ -n "$ns" tasks delete -f "$id" >/dev/null 2>&1 || true
			ctr_ -n "$ns" containers delete "$id" >/dev/null 2>&1 ||
				warn "could not delete container $ns/$id"
		done
	done
}

# kill_leftovers: containers runc still knows about under our runc root, and shims of our socket.
kill_leftovers() {
	local root id pid ns sid args i
	# CRI containers use our runc root; `ctr run` ones use runc's default under /run/containerd.
	# Only containers whose bundle lives in our state dir are ours.
	if command -v runc >/dev/null; then
		for root in "$RUNC_ROOT"/*/ /run/containerd/runc/*/; do
			[[ -d $root ]] || continue
			for id in $(runc --root "$root" list 2>/dev/null |
				awk -v p="$DIR/state/" 'NR > 1 && index($4, p) == 1 { print $1 }'); do
				log "killing leftover container $id (runc root $root)"
				runc --root "$root" delete --force "$id" >/dev/null 2>&1 ||
					warn "runc delete --force $id (root $root) failed"
			done
		done
	fi
	for pid in $(pids_matching -address "$SOCK"); do
		[[ $(readlink "/proc/$pid/exe" 2>/dev/null) == */containerd-shim* ]] || continue
		mapfile -d '' -t args <"/proc/$pid/cmdline" 2>/dev/null || args=()
		ns="" sid=""
		for ((i = 0; i < ${#args[@]} - 1; i++)); do
			case ${args[i]} in
			-namespace) ns=${args[i + 1]} ;;
			-id) sid=${args[i + 1]} ;;
			esac
		done
		log "stopping leftover shim pid $pid (namespace $ns, id $sid)"
		stop_pid "$pid" containerd-shim 3
		# The shim's socket name is sha256("<containerd address>/<namespace>/<id>").
		if [[ -n $ns && -n $sid ]]; then
			rm -f "/run/containerd/s/$(printf '%s' "$SOCK/$ns/$sid" | sha256sum | cut -d' ' -f1)"
		fi
	done
}

unmount_all() {
	local mps mp
	for _ in 1 2 3; do
		mapfile -t mps < <(awk -v p="$DIR/" 'index($5, p) == 1 { print $5 }' /proc/self/mountinfo | tac)
		((${#mps[@]})) || return 0
		for mp in "${mps[@]}"; do
			mp=$(printf '%b' "$mp") # mountinfo escapes spaces etc. as \040
			umount "$mp" 2>/dev/null || umount -l "$mp" 2>/dev/null || true
		done
	done
	mapfile -t mps < <(awk -v p="$DIR/" 'index($5, p) == 1 { print $5 }' /proc/self/mountinfo)
	((${#mps[@]} == 0)) || warn "still mounted under $DIR: ${mps[*]}"
}

cleanup_network() {
	local line chain rest n=0
	local -A pod_chains=()
	if ip link show "$CNI_BRIDGE" >/dev/null 2>&1; then
		log "deleting bridge $CNI_BRIDGE"
		ip link del "$CNI_BRIDGE" || warn "could not delete bridge $CNI_BRIDGE"
	fi
	command -v iptables >/dev/null || return 0
	# Rules the bridge (ipMasq) and portmap plugins made for OUR network carry a comment with
	# name: "rkubelet-dev". Delete those in shared chains (POSTROUTING, CNI-HOSTPORT-DNAT), then
	# the per-pod CNI-* chains they jump to or that hold such rules.
	while IFS= read -r line; do
		[[ $line == -A\ * && $line == *"name: \\\"$CNI_NETWORK\\\""* ]] || continue
		chain=${line#-A }
		chain=${chain%% *}
		if [[ $chain == CNI-* && $chain != CNI-HOSTPORT-* ]]; then
			pod_chains[$chain]=1
			continue
		fi
		if [[ $line =~ -j\ (CNI-[A-Za-z0-9-]+) ]] && [[ ${BASH_REMATCH[1]} != CNI-HOSTPORT-* ]]; then
			pod_chains[${BASH_REMATCH[1]}]=1
		fi
		rest=${line#-A }
		eval "iptables -w -t nat -D $rest" 2>/dev/null || warn "iptables could not delete: $line"
		n=$((n + 1))
	done < <(iptables -w -t nat -S 2>/dev/null || true)
	for chain in "${!pod_chains[@]}"; do
		iptables -w -t nat -F "$chain" 2>/dev/null || true
		iptables -w -t nat -X "$chain" 2>/dev/null || warn "iptables could not delete chain $chain"
	done
	if ((n + ${#pod_chains[@]} > 0)); then
		log "deleted $n iptables rules and ${#pod_chains[@]} chains of CNI network $CNI_NETWORK"
	fi
	# The shared portmap chains go only when no other CNI network still has hostPort rules.
	if iptables -w -t nat -S CNI-HOSTPORT-DNAT >/dev/null 2>&1 &&
		[[ -z $(iptables -w -t nat -S CNI-HOSTPORT-DNAT | grep '^-A' || true) ]]; then
		while IFS= read -r line; do
			[[ $line == -A\ * && $line == *"-j CNI-HOSTPORT-"* ]] || continue
			rest=${line#-A }
			eval "iptables -w -t nat -D $rest" 2>/dev/null || true
		done < <(iptables -w -t nat -S 2>/dev/null || true)
		for chain in CNI-HOSTPORT-DNAT CNI-HOSTPORT-SETMARK CNI-HOSTPORT-MASQ; do
			iptables -w -t nat -F "$chain" 2>/dev/null || true
			iptables -w -t nat -X "$chain" 2>/dev/null || true
		done
	fi
	if [[ -f $DIR/ip_forward.orig ]]; then
		cat "$DIR/ip_forward.orig" >/proc/sys/net/ipv4/ip_forward 2>/dev/null || true
		rm -f "$DIR/ip_forward.orig"
	fi
}

# Empty pod cgroups left by runc (it removes only each container's leaf cgroup).
# Skipped while any other containerd runs: the kubepods tree is host-wide and another
# kubelet/runtime may be about to use an empty pod cgroup it just created.
remove_empty_pod_cgroups() {
	local top d
	for d in /proc/[0-9]*; do
		if [[ $(readlink "$d/exe" 2>/dev/null) == */containerd ]]; then
			log "another containerd runs (pid ${d#/proc/}); leaving empty kubepods cgroups alone"
			return 0
		fi
	done
	for top in /sys/fs/cgroup/*/kubepods /sys/fs/cgroup/kubepods /sys/fs/cgroup/*/kubepods.slice \
		/sys/fs/cgroup/kubepods.slice; do
		[[ -d $top ]] || continue
		find "$top" -depth -type d -exec rmdir {} + 2>/dev/null || true
	done
	# Per-test cgroup roots of the binary's containerd tests (cgroupRoot /rkt-<pid>-<n>).
	for top in /sys/fs/cgroup/*/rkt-* /sys/fs/cgroup/rkt-*; do
		[[ -d $top ]] || continue
		find "$top" -depth -type d -exec rmdir {} + 2>/dev/null || true
	done
}

# ---------------------------------------------------------------------------------------------
# commands

lock() {
	mkdir -p "$DIR"
	exec 9>"$DIR/.lock"
	flock -w 300 9 || die "another dev/runtime.sh holds $DIR/.lock for more than 300s"
}

cmd_up() {
	[[ $(id -u) == 0 ]] || die "dev/runtime.sh up must run as root"
	local t0=$SECONDS
	ensure_packages
	lock
	write_configs
	build_pause
	build_busybox
	start_containerd
	import_image "$IMG_DIR/pause.tar" "${PAUSE_NAMES[@]}"
	import_image "$IMG_DIR/busybox.tar" "${BUSYBOX_NAMES[@]}"
	log "up in $((SECONDS - t0))s; images: ${PAUSE_NAMES[*]} ${BUSYBOX_NAMES[*]}"
	echo "$ENDPOINT"
}

cmd_images() {
	[[ $(id -u) == 0 ]] || die "dev/runtime.sh images must run as root"
	ensure_packages
	lock
	mkdir -p "$IMG_DIR"
	build_pause
	build_busybox
	echo "$IMG_DIR"
}

cmd_down() {
	[[ $(id -u) == 0 ]] || die "dev/runtime.sh down must run as root"
	if [[ ! -d $DIR ]]; then
		log "nothing to do: $DIR does not exist"
		return 0
	fi
	lock
	stop_detached_rkubelet
	local pid
	if pid=$(containerd_pid); then
		if [[ -S $SOCK ]]; then
			remove_containers
		fi
		log "stopping containerd (pid $pid)"
		stop_pid "$pid" containerd 10
	fi
	rm -f "$PIDFILE" "$DIR/containerd.started"
	remove_socket "$SOCK"
	remove_socket "$SOCK.ttrpc"
	kill_leftovers
	unmount_all
	cleanup_network
	# Every pod is gone, so every address is free again (host-local does not reuse at once).
	rm -rf "$CNI_IPAM_DIR"
	remove_empty_pod_cgroups
	log "down"
}

cmd_env() {
	printf 'export RKUBELET_CRI_ENDPOINT=%q\n' "$ENDPOINT"
	printf 'export RKUBELET_DEV_DIR=%q\n' "$DIR"
	printf 'export RKUBELET_REGISTRY_HOSTS_DIR=%q\n' "$REGISTRY_HOSTS_DIR"
}

cmd_status() {
	local pid
	if pid=$(containerd_pid); then
		echo "containerd running (pid $pid), endpoint $ENDPOINT, CRI plugin: $(cri_plugin_state)"
		ctr_ -n "$NS" images ls 2>/dev/null | awk '{ printf "%-45s %s\n", $1, $3 }'
	else
		echo "containerd not running (dev dir $DIR)"
		return 1
	fi
}

cmd_purge() {
	cmd_down
	case $DIR in
	/ | /tmp | /root | /home | /usr | /var | /etc) die "refusing to delete $DIR" ;;
	esac
	log "deleting $DIR"
	rm -rf "$DIR"
}

case ${1:-} in
up) cmd_up ;;
down) cmd_down ;;
env) cmd_env ;;
status) cmd_status ;;
purge) cmd_purge ;;
images) cmd_images ;;
-h | --help | help)
	usage
	;;
*)
	usage
	exit 2
	;;
esac
