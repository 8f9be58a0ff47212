#!/bin/bash
# Runs every issue-18 benchmark in one invocation on a quiet machine and keeps the figures.
# Owns: a private containerd under $BENCH_DEV_DIR (default /tmp/rkubelet-bench), brought up
#       here and purged at the end (never the shared dev containerd: rkubelet removes runtime
#       pods no source knows); the JSON results in bench/ and the logs in $BENCH_LOG_DIR.
# Receives: env BENCH_ONLY="podstart churn ..." to run a subset; BENCH_TARGET_DIR (default
#       target); the release binaries (and the dist binary, if built) must already exist:
#         cargo build --release -p rkubelet -p rkubelet-bench
#         cargo build --profile dist -p rkubelet        # optional: size and start-up
# Emits: each benchmark's Markdown table on stdout and in $BENCH_LOG_DIR/<name>.log.
set -euo pipefail
cd "$(dirname "$0")/.."

T=${BENCH_TARGET_DIR:-${CARGO_TARGET_DIR:-target}}
REL=$T/release
DEV=${BENCH_DEV_DIR:-/tmp/rkubelet-bench}
LOGS=${BENCH_LOG_DIR:-/tmp/rkubelet-bench-logs}
ONLY=${BENCH_ONLY:-"relist dist startup podstart steady churn apistart scrape hollow"}
mkdir -p "$LOGS"

for b in rkubelet podstart apistart churn startup scrape relist hollow; do
	[[ -x $REL/$b ]] || { echo "missing $REL/$b: cargo build --release -p rkubelet -p rkubelet-bench" >&2; exit 1; }
done
KUBELET=$REL/rkubelet
[[ -x $T/dist/rkubelet ]] && KUBELET=$T/dist/rkubelet

busy=$(awk '{print $1}' /proc/loadavg)
echo "load average before the run: $busy (a quiet machine is below ~0.5); kubelet: $KUBELET"

RKUBELET_DEV_DIR=$DEV ./dev/runtime.sh up >"$LOGS/runtime.log"
trap 'RKUBELET_DEV_DIR=$DEV ./dev/runtime.sh purge >>"$LOGS/runtime.log" 2>&1 || true' EXIT
EP=unix://$DEV/containerd.sock

run() {
	local name=$1
	shift
	[[ " $ONLY " == *" $name "* ]] || return 0
	echo
	echo "===== $name: $* ($(date -u +%H:%M:%S))"
	"$@" 2>&1 | tee "$LOGS/$name.log"
}

run relist "$REL/relist"
if [[ " $ONLY " == *" dist "* && -x $T/dist/rkubelet ]]; then
	strip -o "$LOGS/rkubelet.stripped" "$T/dist/rkubelet"
	echo "===== dist: $(stat -c %s "$T/dist/rkubelet") bytes with line tables, $(stat -c %s "$LOGS/rkubelet.stripped") stripped" | tee "$LOGS/dist.log"
fi
run startup "$REL/startup" --endpoint "$EP" --kubelet "$KUBELET" --runs 30 --out bench/results-startup.json
run podstart "$REL/podstart" --endpoint "$EP" --kubelet "$KUBELET" --counts 30,110 --rounds 5 --timeline --out bench/results-podstart.json
run steady "$REL/churn" steady --endpoint "$EP" --kubelet "$KUBELET" --pods 110 --settle-secs 120 --window-secs 60 --out bench/results-steady.json
run churn "$REL/churn" real --endpoint "$EP" --kubelet "$KUBELET" --pods 100 --rounds 10 --out bench/results-churn.json
run apistart "$REL/apistart" --endpoint "$EP" --kubelet "$KUBELET" --counts 10,110 --rounds 3 --steady-secs 60 --out bench/results-apistart.json
run scrape "$REL/scrape" --endpoint "$EP" --kubelet "$KUBELET" --pods 110 --requests 200 --out bench/results-scrape.json
run hollow "$REL/hollow" --nodes "${HOLLOW_NODES:-10,100,1000}" --pods 10 --steady-secs 60 --out bench/results-hollow.json
echo
echo "load average after the run: $(awk '{print $1}' /proc/loadavg)"
