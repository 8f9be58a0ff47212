#!/usr/bin/env bash
# dev/faults.sh: the reliability fault matrix (issue 17) on the real containerd, with its table.
#
# Owns:     nothing persistent; starts the dev containerd (dev/runtime.sh up) like dev/test.sh
#           and leaves it running.
# Receives: one optional mode: --short (default: the CI form, ≤ 10 min), --full (the whole
#           matrix as docs/reliability.md states it, without the soak), --soak [MINUTES] (the
#           soak alone, default 120 minutes). Further arguments go to `cargo nextest run`.
# Emits:    nextest's output, then the table of rows (row, form, fault, what held, figures),
#           one per passed row; exit status 0 only if every fault test passed.
#
# Every fault test lives in crates/rkubelet/tests/it/containerd_faults_*.rs and reports its row
# through tests/it/common/faults.rs (RKUBELET_FAULTS_REPORT); dev/test.sh runs the short form too.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
command -v cargo >/dev/null || PATH=$HOME/.cargo/bin:$PATH

MODE=short
FILTER='kind(test) & test(/^containerd_faults_/)'
case ${1:-} in
--short) shift ;;
--full)
	MODE=full
	FILTER='kind(test) & test(/^containerd_faults_/) & !test(/^containerd_faults_soak::/)'
	shift
	;;
--soak)
	shift
	MINUTES=120
	if [[ ${1:-} =~ ^[0-9]+$ ]]; then
		MINUTES=$1
		shift
	fi
	export RKUBELET_SOAK_MINUTES=$MINUTES
	FILTER='kind(test) & test(/^containerd_faults_soak::/)'
	;;
-h | --help)
	sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'
	exit 0
	;;
esac
export RKUBELET_FAULTS=$MODE

EP=$("$ROOT/dev/runtime.sh" up | tail -n1)
[[ $EP == unix://* ]] || {
	echo "dev/faults.sh: dev/runtime.sh up failed" >&2
	exit 1
}
eval "$("$ROOT/dev/runtime.sh" env)"
export RKUBELET_CRI_ENDPOINT RKUBELET_DEV_DIR

REPORT=$(mktemp /tmp/rkubelet-faults.XXXXXX.tsv)
export RKUBELET_FAULTS_REPORT=$REPORT
rc=0
cargo nextest run -p rkubelet --no-fail-fast -E "$FILTER" "$@" || rc=$?

print_table() {
	echo
	echo "| row | form | fault | what held | figures |"
	echo "|---|---|---|---|---|"
	sort -t$'\t' -k1,1V "$1" | awk -F'\t' '{ printf "| %s | %s | %s | %s | %s |\n", $1, $2, $3, $4, $5 }'
}
print_table "$REPORT"
rm -f "$REPORT"
if ((rc == 0)); then echo "dev/faults.sh: every fault test passed ($MODE)"; else echo "dev/faults.sh: FAILED ($MODE)"; fi
exit "$rc"
