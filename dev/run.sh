#!/usr/bin/env bash
# dev/run.sh: run rkubelet standalone against the dev containerd with the example static pods.
#
# Owns:     $RKUBELET_DEV_DIR/{kubelet,pod-logs,pki,rkubelet.log,rkubelet.pid,kubelet-config.yaml}
#           (pki: the dev CA and certificates from dev/pki.sh; the HTTPS port 10250 admits only
#           their holder, see the curl line printed at the end).
# Receives: [--detach] [--no-build] [--timeout SECONDS] [-- extra rkubelet flags...].
# Emits:    rkubelet's log (stderr in the foreground, $DIR/rkubelet.log with --detach) and, once
#           every pod from examples/manifests is Running, a table NAME / PHASE / CONTAINERS READY /
#           POD IP read from the read-only port (http://127.0.0.1:10255/pods).
#
# Foreground (default): rkubelet stays attached; Ctrl-C stops it (the pods keep running until
# rkubelet or `dev/runtime.sh down` removes them). --detach: rkubelet runs in the background;
# stop it with `dev/runtime.sh down` (which also stops containerd) or `kill $(cat …/rkubelet.pid)`.
set -euo pipefail

usage() {
	sed -n '2,14p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
}

log() { printf '[run.sh] %s\n' "$*" >&2; }
die() {
	printf '[run.sh] ERROR: %s\n' "$*" >&2
	exit 1
}

DETACH=0
BUILD=1
TIMEOUT=120
EXTRA=()
while (($#)); do
	case $1 in
	--detach | -d) DETACH=1 ;;
	--no-build) BUILD=0 ;;
	--timeout)
		[[ ${2:-} =~ ^[0-9]+$ ]] || die "--timeout needs a number of seconds"
		TIMEOUT=$2
		shift
		;;
	--)
		shift
		EXTRA=("$@")
		break
		;;
	-h | --help)
		usage
		exit 0
		;;
	*) die "unknown argument '$1' (see --help)" ;;
	esac
	shift
done

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
DIR=$(realpath -m "${RKUBELET_DEV_DIR:-/tmp/rkubelet-dev}")
export RKUBELET_DEV_DIR=$DIR
MANIFESTS=$ROOT/examples/manifests
CONFIG=$ROOT/examples/kubelet-config.yaml
BIN=${RKUBELET_BIN:-$ROOT/target/release/rkubelet}
PIDFILE=$DIR/rkubelet.pid
RKLOG=$DIR/rkubelet.log
PODS_URL=http://127.0.0.1:10255/pods
command -v cargo >/dev/null || PATH=$HOME/.cargo/bin:$PATH

command -v python3 >/dev/null || die "python3 is needed to read /pods (run dev/runtime.sh up)"
command -v curl >/dev/null || die "curl is needed to poll $PODS_URL (run dev/runtime.sh up)"

# 1. containerd
EP=$("$ROOT/dev/runtime.sh" up | tail -n1) || die "dev/runtime.sh up failed (see above)"
[[ $EP == unix://* ]] || die "dev/runtime.sh up printed '$EP', expected a unix:// endpoint"
log "containerd at $EP"

# 2. rkubelet binary
if ((BUILD)); then
	log "cargo build --release -p rkubelet"
	cargo build --release -p rkubelet >&2 || die "cargo build --release -p rkubelet failed"
fi
[[ -x $BIN ]] || die "$BIN not found (build it with: cargo build --release -p rkubelet)"

# 3. one rkubelet at a time
if [[ -f $PIDFILE ]]; then
	old=$(cat "$PIDFILE")
	if [[ $old =~ ^[0-9]+$ ]] && [[ $(readlink "/proc/$old/exe" 2>/dev/null) == */rkubelet ]]; then
		die "rkubelet already running (pid $old, log $RKLOG); stop it: kill $old (or dev/runtime.sh down)"
	fi
	rm -f "$PIDFILE"
fi
if curl -s -o /dev/null --max-time 2 "$PODS_URL"; then
	die "something already answers on $PODS_URL (another kubelet?); stop it first"
fi

# The example config names the default dev dir; use a rewritten copy for any other.
if [[ $DIR != /tmp/rkubelet-dev ]]; then
	sed "s#/tmp/rkubelet-dev#$DIR#g; s#^staticPodPath: .*#staticPodPath: $MANIFESTS#" \
		"$CONFIG" >"$DIR/kubelet-config.yaml"
	CONFIG=$DIR/kubelet-config.yaml
fi
mkdir -p "$DIR/pod-logs"
# The HTTPS port admits only the dev CA's client certificate (examples/kubelet-config.yaml).
"$ROOT/dev/pki.sh" "$DIR/pki" || die "dev/pki.sh $DIR/pki failed"
mkdir -p -m 0750 "$DIR/kubelet" # the root dir mode the kubelet gives a root dir it creates

ARGS=(--config "$CONFIG"
	--pod-manifest-path "$MANIFESTS"
	--container-runtime-endpoint "$EP"
	--root-dir "$DIR/kubelet"
	--hostname-override rkubelet-dev
	"${EXTRA[@]}")

# 4. start it
if ((DETACH)); then
	echo "==== $(date -u +%FT%TZ) dev/run.sh: $BIN ${ARGS[*]}" >>"$RKLOG"
	setsid "$BIN" "${ARGS[@]}" </dev/null >>"$RKLOG" 2>&1 &
	PID=$!
	echo "$PID" >"$PIDFILE"
	log "rkubelet started in the background (pid $PID, log $RKLOG)"
else
	log "running: $BIN ${ARGS[*]}"
	"$BIN" "${ARGS[@]}" </dev/null &
	PID=$!
	echo "$PID" >"$PIDFILE"
	stop_child() {
		log "stopping rkubelet (pid $PID)"
		kill -TERM "$PID" 2>/dev/null || true
	}
	trap stop_child INT TERM
fi

log_tail() {
	if ((DETACH)) && [[ -f $RKLOG ]]; then
		echo "---- last 30 lines of $RKLOG ----" >&2
		tail -n 30 "$RKLOG" >&2
	fi
}

want=$(find "$MANIFESTS" -maxdepth 1 -type f \( -name '*.yaml' -o -name '*.yml' -o -name '*.json' \) | wc -l)

# pods_table JSON WANT: print the table; exit 0 if at least WANT pods and all are Running.
pods_table() {
	python3 - "$1" "$2" <<'EOF'
import json, sys

try:
    pods = json.loads(sys.argv[1]).get("items") or []
except (ValueError, AttributeError) as e:
    print(f"(could not parse /pods: {e})")
    sys.exit(2)
want = int(sys.argv[2])
rows = [("NAME", "PHASE", "CONTAINERS READY", "POD IP")]
running = 0
for p in sorted(pods, key=lambda p: p.get("metadata", {}).get("name", "")):
    meta, spec, st = p.get("metadata") or {}, p.get("spec") or {}, p.get("status") or {}
    total = len(spec.get("containers") or [])
    ready = sum(1 for c in st.get("containerStatuses") or [] if c.get("ready"))
    phase = st.get("phase") or "Unknown"
    running += phase == "Running"
    rows.append((meta.get("name", "?"), phase, f"{ready}/{total}", st.get("podIP") or "-"))
widths = [max(len(r[i]) for r in rows) for i in range(4)]
for r in rows:
    print("   ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
sys.exit(0 if len(pods) >= want and running == len(pods) else 1)
EOF
}

# 5. wait until every pod is Running
log "waiting up to ${TIMEOUT}s for $want pods to be Running ($PODS_URL)"
deadline=$((SECONDS + TIMEOUT))
table=""
ok=0
while ((SECONDS < deadline)); do
	if ! kill -0 "$PID" 2>/dev/null; then
		log_tail
		rc=0
		wait "$PID" 2>/dev/null || rc=$?
		rm -f "$PIDFILE"
		die "rkubelet exited (status $rc) before its pods were Running"
	fi
	if json=$(curl -sf --max-time 2 "$PODS_URL" 2>/dev/null); then
		if table=$(pods_table "$json" "$want"); then
			ok=1
			break
		fi
	fi
	sleep 1
done

if ((ok)); then
	echo "$table"
	log "all $want pods Running after $((TIMEOUT - (deadline - SECONDS)))s"
else
	[[ -n $table ]] && echo "$table"
	log_tail
	log "ERROR: not every pod was Running within ${TIMEOUT}s (see $PODS_URL)"
	if ((!DETACH)); then
		stop_child
		wait "$PID" 2>/dev/null || true
		rm -f "$PIDFILE"
	fi
	exit 1
fi

log "try: curl -s $PODS_URL | python3 -m json.tool;  pod logs: $DIR/pod-logs"
log "HTTPS port (client certificate only): curl --cacert $DIR/pki/ca.crt --cert $DIR/pki/admin.crt --key $DIR/pki/admin.key https://127.0.0.1:10250/pods"
if ((DETACH)); then
	log "rkubelet keeps running (pid $PID); stop everything with: dev/runtime.sh down"
	exit 0
fi
log "rkubelet runs in the foreground; Ctrl-C stops it"
rc=0
while kill -0 "$PID" 2>/dev/null; do
	wait "$PID" || rc=$?
done
rm -f "$PIDFILE"
exit "$rc"
