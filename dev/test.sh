#!/usr/bin/env bash
# dev/test.sh: the project's whole check, as CI runs it (.ci/run execs this).
#
# Owns:     nothing persistent; starts the dev containerd (dev/runtime.sh up) and, if it was
#           not running before, stops it again on exit (dev/runtime.sh down); starts the private
#           test registry (dev/registry.sh up) and, if it was not running before, stops it on
#           exit (dev/registry.sh down).
# Receives: env RKUBELET_KEEP_RUNTIME=1 to leave containerd (and the registry) running even if
#           this script started it; any arguments are passed on to `cargo nextest run` (e.g. a filter).
# Emits:    the output of each step, a summary table, and as the last line
#           `tests: N passed, N failed[, N skipped]`. Exit status 0 only if every step passed.
#
# Steps: runtime up (export RKUBELET_CRI_ENDPOINT for the integration tests, which FAIL when it
# is missing), registry up (export RKUBELET_REGISTRY*, same rule), cargo fmt --check, cargo
# clippy -D warnings, cargo nextest run (cargo test when nextest is missing).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
command -v cargo >/dev/null || PATH=$HOME/.cargo/bin:$PATH
export CARGO_TERM_COLOR=${CARGO_TERM_COLOR:-never}

banner() { printf '\n========== %s ==========\n' "$*" >&2; }
log() { printf '[test.sh] %s\n' "$*" >&2; }

STEPS=()
RESULTS=()
TEST_LINE=""
T0=$SECONDS

# Free space decides the kubelet's disk pressure and image GC; a CI failure report then says
# how full the disk was (test kubelets get thresholds only a nearly full disk trips).
disk_line() { log "disk at $1: $(df -h --output=avail,pcent "$ROOT" | tail -n 1 | xargs) available/used on $ROOT"; }
disk_line start
STARTED_RUNTIME=0
STARTED_REGISTRY=0
OUT=$(mktemp -d /tmp/rkubelet-test.XXXXXX)
# The fault matrix's short form runs with the other tests; its rows are printed in the summary.
export RKUBELET_FAULTS_REPORT=$OUT/faults.tsv

finish() {
	local rc=$? i failed=0
	if ((STARTED_REGISTRY)) && [[ ${RKUBELET_KEEP_RUNTIME:-0} != 1 ]]; then
		banner "dev/registry.sh down"
		"$ROOT/dev/registry.sh" down || log "WARNING: dev/registry.sh down failed"
	fi
	if ((STARTED_RUNTIME)) && [[ ${RKUBELET_KEEP_RUNTIME:-0} != 1 ]]; then
		banner "dev/runtime.sh down"
		"$ROOT/dev/runtime.sh" down || log "WARNING: dev/runtime.sh down failed"
	elif ((STARTED_RUNTIME == 0)) && [[ -n ${RKUBELET_CRI_ENDPOINT:-} ]]; then
		log "containerd was already running before dev/test.sh; leaving it running"
	fi
	banner "summary ($((SECONDS - T0))s)"
	disk_line end
	for i in "${!STEPS[@]}"; do
		printf '  %-10s %s\n' "${RESULTS[i]}" "${STEPS[i]}"
		[[ ${RESULTS[i]} == PASS ]] || failed=1
	done
	if [[ -s $RKUBELET_FAULTS_REPORT ]]; then
		echo "  fault matrix (short form; dev/faults.sh --full for the whole):"
		sort -t$'\t' -k1,1V "$RKUBELET_FAULTS_REPORT" | awk -F'\t' '{ printf "    row %s: %s -> %s\n", $1, $3, $5 }'
	fi
	rm -rf "$OUT"
	if ((rc == 0 && failed)); then rc=1; fi
	if ((rc == 0)); then echo "dev/test.sh: ALL STEPS PASSED"; else echo "dev/test.sh: FAILED"; fi
	[[ -n $TEST_LINE ]] && echo "$TEST_LINE"
	exit "$rc"
}
trap finish EXIT

# step NAME CMD...: run CMD, record PASS/FAIL, never abort the script.
step() {
	local name=$1 rc=0
	shift
	banner "$name"
	"$@" || rc=$?
	STEPS+=("$name")
	if ((rc == 0)); then
		RESULTS+=(PASS)
	else
		RESULTS+=("FAIL($rc)")
		log "step '$name' FAILED with status $rc"
	fi
	return 0
}

# 1. runtime: a failure here is fatal (the integration tests cannot run without it).
banner "dev/runtime.sh up"
if "$ROOT/dev/runtime.sh" status >/dev/null 2>&1; then
	log "dev containerd already running"
else
	STARTED_RUNTIME=1
fi
if ! EP=$("$ROOT/dev/runtime.sh" up | tail -n1) || [[ $EP != unix://* ]]; then
	STEPS+=("dev/runtime.sh up")
	RESULTS+=(FAIL)
	log "ERROR: dev/runtime.sh up failed: containerd (and the packages it installs) are needed"
	exit 1
fi
eval "$("$ROOT/dev/runtime.sh" env)"
if [[ ${RKUBELET_CRI_ENDPOINT:-} != "$EP" ]]; then
	log "ERROR: dev/runtime.sh env gave '${RKUBELET_CRI_ENDPOINT:-}', up gave '$EP'"
	exit 1
fi
export RKUBELET_CRI_ENDPOINT RKUBELET_DEV_DIR
STEPS+=("dev/runtime.sh up ($RKUBELET_CRI_ENDPOINT)")
RESULTS+=(PASS)
log "RKUBELET_CRI_ENDPOINT=$RKUBELET_CRI_ENDPOINT"

# The private registry of the private-image tests (needs containerd for the image push); as
# fatal as the runtime: those tests FAIL without it.
banner "dev/registry.sh up"
if "$ROOT/dev/registry.sh" status >/dev/null 2>&1; then
	log "dev registry already running"
else
	STARTED_REGISTRY=1
fi
if ! REG=$("$ROOT/dev/registry.sh" up | tail -n1) || [[ $REG != 127.0.0.1:* ]]; then
	STEPS+=("dev/registry.sh up")
	RESULTS+=(FAIL)
	log "ERROR: dev/registry.sh up failed: the private-image tests need the registry"
	exit 1
fi
eval "$("$ROOT/dev/registry.sh" env)"
export RKUBELET_REGISTRY RKUBELET_REGISTRY_USER RKUBELET_REGISTRY_PASSWORD
STEPS+=("dev/registry.sh up ($RKUBELET_REGISTRY)")
RESULTS+=(PASS)

if [[ -f $RKUBELET_DEV_DIR/rkubelet.pid ]] &&
	[[ $(readlink "/proc/$(cat "$RKUBELET_DEV_DIR/rkubelet.pid")/exe" 2>/dev/null) == */rkubelet ]]; then
	log "WARNING: an rkubelet started by dev/run.sh is running (pid $(cat "$RKUBELET_DEV_DIR/rkubelet.pid"));"
	log "WARNING: it removes runtime pods it does not know, so integration tests may flake. Stop it first."
fi

command -v cargo >/dev/null || {
	log "ERROR: cargo not found"
	exit 1
}

# 2. formatting and lints
step "cargo fmt --all -- --check" cargo fmt --all -- --check
step "cargo clippy --workspace --all-targets -- -D warnings" \
	cargo clippy --workspace --all-targets -- -D warnings

# 3. tests
run_tests() {
	local log=$OUT/tests.log rc=0 passed failed skipped
	if cargo nextest --version >/dev/null 2>&1; then
		cargo nextest run --workspace --no-fail-fast "$@" 2>&1 | tee "$log" || rc=${PIPESTATUS[0]}
		# "Summary [ 1.2s] 57 tests run: 55 passed, 1 failed, 1 timed out, 2 skipped"
		local summary
		summary=$(grep -E 'Summary \[.*tests? run:' "$log" | tail -n1 || true)
		if [[ -n $summary ]]; then
			passed=$(grep -oE '[0-9]+ passed' <<<"$summary" | grep -oE '[0-9]+' || echo 0)
			failed=0
			local n
			for n in $(grep -oE '[0-9]+ (failed|timed out)' <<<"$summary" | grep -oE '^[0-9]+' || true); do
				failed=$((failed + n))
			done
			skipped=$(grep -oE '[0-9]+ skipped' <<<"$summary" | grep -oE '[0-9]+' || echo 0)
			TEST_LINE="tests: ${passed:-0} passed, ${failed:-0} failed, ${skipped:-0} skipped"
		fi
	else
		log "cargo-nextest not found; falling back to cargo test"
		cargo test --workspace --no-fail-fast "$@" 2>&1 | tee "$log" || rc=${PIPESTATUS[0]}
		read -r passed failed skipped < <(awk '/^test result:/ {
			for (i = 1; i <= NF; i++) {
				if ($(i+1) ~ /^passed/) p += $i
				if ($(i+1) ~ /^failed/) f += $i
				if ($(i+1) ~ /^ignored/) s += $i
			}
		} END { print p+0, f+0, s+0 }' "$log")
		TEST_LINE="tests: $passed passed, $failed failed, $skipped skipped"
	fi
	return "$rc"
}
if cargo nextest --version >/dev/null 2>&1; then
	step "cargo nextest run --workspace --no-fail-fast" run_tests "$@"
else
	step "cargo test --workspace --no-fail-fast" run_tests "$@"
fi
