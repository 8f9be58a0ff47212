#!/usr/bin/env bash
# dev/registry.sh: a private image registry for the private-image (imagePullSecrets) tests.
#
# Owns:     everything under $RKUBELET_REGISTRY_DIR (default /tmp/rkubelet-dev/registry): the
#           registry's config, htpasswd file, storage, pid file and log; plus the containerd
#           hosts file $RKUBELET_REGISTRY_HOSTS_DIR/127.0.0.1:<port>/hosts.toml.
# Receives: one command: up | down | env | status (see usage below). Needs the dev containerd
#           (dev/runtime.sh up) for `up`: it pushes the busybox image into the registry.
# Emits:    `up` prints `127.0.0.1:<port>` as the LAST line of stdout; `env` prints export lines
#           for eval. All other chatter goes to stderr.
#
# The registry is Debian's `docker-registry` (the CNCF distribution registry, installed with apt
# when missing), run directly as a process (no systemd) on 127.0.0.1 with htpasswd basic auth
# over plain HTTP. containerd (1.6, `config_path` = RKUBELET_REGISTRY_HOSTS_DIR, written by
# dev/runtime.sh) reads the hosts file on every pull, so containerd is never restarted.
set -euo pipefail

usage() {
	cat >&2 <<'EOF'
usage: dev/registry.sh up|down|env|status

  up     install missing packages, write config + htpasswd + hosts.toml, start the registry
         (idempotent) and push 127.0.0.1:<port>/private/app:1; prints 127.0.0.1:<port>
  down   stop the registry and remove its hosts.toml (idempotent; storage is kept)
  env    print `export RKUBELET_REGISTRY=… RKUBELET_REGISTRY_USER=… RKUBELET_REGISTRY_PASSWORD=…`
  status exit 0 when the registry runs (and say so), 1 otherwise

env: RKUBELET_REGISTRY_DIR (default $RKUBELET_DEV_DIR/registry), RKUBELET_REGISTRY_PORT
     (default 5055), RKUBELET_REGISTRY_USER / RKUBELET_REGISTRY_PASSWORD (default rkubelet /
     a password fixed for the dev setup; test-only credentials)
EOF
}

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
eval "$("$HERE/runtime.sh" env)"
DIR=$(realpath -m "${RKUBELET_REGISTRY_DIR:-$RKUBELET_DEV_DIR/registry}")
PORT=${RKUBELET_REGISTRY_PORT:-5055}
ADDR=127.0.0.1:$PORT
USER_=${RKUBELET_REGISTRY_USER:-rkubelet}
PASSWORD=${RKUBELET_REGISTRY_PASSWORD:-dev-registry-Pa55}
CFG=$DIR/config.yml
HTPASSWD=$DIR/htpasswd
STORAGE=$DIR/storage
LOG=$DIR/registry.log
PIDFILE=$DIR/registry.pid
HOSTS_DIR=$RKUBELET_REGISTRY_HOSTS_DIR/$ADDR
SOCK=${RKUBELET_CRI_ENDPOINT#unix://}
NS=k8s.io
RUNTIME_DIR=$HERE
PRIVATE_IMAGE=$ADDR/private/app:1
PACKAGES=(docker-registry apache2-utils)

log() { printf '[registry.sh] %s\n' "$*" >&2; }
die() {
	printf '[registry.sh] ERROR: %s\n' "$*" >&2
	exit 1
}

ctr_() { timeout 120 ctr --address "$SOCK" -n "$NS" "$@"; }

ensure_packages() {
	local missing=() p
	command -v dpkg-query >/dev/null || die "dpkg-query not found: Debian 12 (apt) only"
	for p in "${PACKAGES[@]}"; do
		if ! dpkg-query -W -f='${db:Status-Abbrev}' "$p" 2>/dev/null | grep -q '^ii'; then
			missing+=("$p")
		fi
	done
	((${#missing[@]} == 0)) && return 0
	log "installing missing packages: ${missing[*]}"
	export DEBIAN_FRONTEND=noninteractive
	local apt_opts=(-o DPkg::Lock::Timeout=300 -o Dpkg::Options::=--force-confdef
		-o Dpkg::Options::=--force-confold)
	apt-get "${apt_opts[@]}" update -qq >&2 || die "apt-get update failed"
	apt-get "${apt_opts[@]}" install -y -qq --no-install-recommends "${missing[@]}" >&2 ||
		die "apt-get install ${missing[*]} failed"
}

registry_pid() {
	local pid
	[[ -f $PIDFILE ]] || return 1
	pid=$(cat "$PIDFILE")
	[[ $(readlink "/proc/$pid/exe" 2>/dev/null) == */docker-registry ]] || return 1
	echo "$pid"
}

write_files() {
	mkdir -p "$DIR" "$STORAGE" "$HOSTS_DIR"
	# bcrypt, as the registry's htpasswd auth requires.
	htpasswd -Bbn "$USER_" "$PASSWORD" >"$HTPASSWD.tmp"
	mv "$HTPASSWD.tmp" "$HTPASSWD"
	cat >"$CFG.tmp" <<EOF
version: 0.1
log:
  level: info
storage:
  filesystem:
    rootdirectory: $STORAGE
  delete:
    enabled: true
http:
  addr: $ADDR
auth:
  htpasswd:
    realm: rkubelet-dev
    path: $HTPASSWD
EOF
	mv "$CFG.tmp" "$CFG"
	cat >"$HOSTS_DIR/hosts.toml.tmp" <<EOF
server = "http://$ADDR"

[host."http://$ADDR"]
  capabilities = ["pull", "resolve"]
  skip_verify = true
EOF
	mv "$HOSTS_DIR/hosts.toml.tmp" "$HOSTS_DIR/hosts.toml"
}

start_registry() {
	local pid i
	if pid=$(registry_pid); then
		log "registry already running (pid $pid) on $ADDR"
		return 0
	fi
	if ss -ltn "sport = :$PORT" 2>/dev/null | grep -q LISTEN; then
		die "port $PORT is taken by another process (set RKUBELET_REGISTRY_PORT)"
	fi
	log "starting docker-registry on $ADDR (log: $LOG)"
	# fd 8 is our lock: the long-lived registry must not inherit it.
	setsid /usr/bin/docker-registry serve "$CFG" >>"$LOG" 2>&1 </dev/null 8>&- &
	echo $! >"$PIDFILE"
	for ((i = 0; i < 100; i++)); do
		# /v2/ answers 401 once the registry serves (auth is required).
		if [[ $(curl -s -o /dev/null -w '%{http_code}' "http://$ADDR/v2/") == 401 ]]; then
			return 0
		fi
		registry_pid >/dev/null || die "docker-registry exited at start; see $LOG: $(tail -n5 "$LOG")"
		sleep 0.1
	done
	die "docker-registry did not answer on $ADDR within 10s; see $LOG"
}

# The private image is its own image (busybox plus a label), never a tag of the dev busybox:
# CRI RemoveImage deletes an image with every name it has, so a test removing the private image
# must not take docker.io/library/busybox with it.
build_private_image() {
	local tar=$DIR/private-app.tar work r applet
	[[ -x /bin/busybox ]] || die "/bin/busybox missing (package busybox-static)"
	work=$(mktemp -d "$DIR/private-build.XXXXXX")
	r=$work/rootfs
	mkdir -p "$r/bin" "$r/tmp"
	cp /bin/busybox "$r/bin/busybox"
	chmod 0755 "$r/bin/busybox"
	for applet in sh sleep cat echo true; do ln -sf busybox "$r/bin/$applet"; done
	python3 "$RUNTIME_DIR/images/mkimage.py" --rootfs "$r" --out "$tar" --name "$PRIVATE_IMAGE" \
		--cmd '["sh"]' --env PATH=/bin --label io.rkubelet.dev/image=private >/dev/null ||
		die "mkimage.py failed for $PRIVATE_IMAGE"
	rm -rf "$work"
	ctr_ images import "$tar" >/dev/null || die "ctr images import $tar failed"
	rm -f "$tar"
}

push_image() {
	[[ $(curl -s -o /dev/null -w '%{http_code}' -u "$USER_:$PASSWORD" \
		-H 'Accept: application/vnd.oci.image.manifest.v1+json, application/vnd.docker.distribution.manifest.v2+json' \
		"http://$ADDR/v2/private/app/manifests/1") == 200 ]] &&
		{
			log "$PRIVATE_IMAGE already in the registry"
			return 0
		}
	[[ -S $SOCK ]] || die "the dev containerd is not running ($SOCK): run dev/runtime.sh up first"
	build_private_image
	ctr_ images push --plain-http --user "$USER_:$PASSWORD" "$PRIVATE_IMAGE" >/dev/null 2>&1 ||
		die "ctr images push $PRIVATE_IMAGE failed"
	# The tests pull it through the registry: do not leave the local copy behind.
	ctr_ images rm "$PRIVATE_IMAGE" >/dev/null 2>&1 || true
	log "pushed $PRIVATE_IMAGE"
}

lock() {
	mkdir -p "$DIR"
	exec 8>"$DIR/.lock"
	flock -w 300 8 || die "another dev/registry.sh holds $DIR/.lock for more than 300s"
}

cmd_up() {
	[[ $(id -u) == 0 ]] || die "dev/registry.sh up must run as root"
	ensure_packages
	lock
	write_files
	start_registry
	push_image
	echo "$ADDR"
}

cmd_down() {
	local pid i
	[[ -d $DIR ]] || {
		log "nothing to do: $DIR does not exist"
		return 0
	}
	lock
	if pid=$(registry_pid); then
		log "stopping docker-registry (pid $pid)"
		kill "$pid" 2>/dev/null || true
		for ((i = 0; i < 50; i++)); do
			[[ -d /proc/$pid ]] || break
			sleep 0.1
		done
		[[ -d /proc/$pid ]] && kill -9 "$pid" 2>/dev/null || true
	fi
	rm -f "$PIDFILE"
	rm -rf "$HOSTS_DIR"
	log "down"
}

cmd_env() {
	printf 'export RKUBELET_REGISTRY=%q\n' "$ADDR"
	printf 'export RKUBELET_REGISTRY_USER=%q\n' "$USER_"
	printf 'export RKUBELET_REGISTRY_PASSWORD=%q\n' "$PASSWORD"
}

cmd_status() {
	local pid
	if pid=$(registry_pid); then
		echo "docker-registry running (pid $pid) on $ADDR, log $LOG"
	else
		echo "docker-registry not running ($DIR)"
		return 1
	fi
}

case ${1:-} in
up) cmd_up ;;
down) cmd_down ;;
env) cmd_env ;;
status) cmd_status ;;
-h | --help | help) usage ;;
*)
	usage
	exit 2
	;;
esac
