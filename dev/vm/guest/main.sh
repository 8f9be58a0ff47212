#!/bin/bash
# dev/vm/guest/main.sh: the guest's test runner (rkubelet-guest.service, started at boot when the
# kernel command line says rkubelet.guest=test).
#
# Owns:     /mnt/share/out (results, per-test logs and journals, the guest's facts).
# Receives: /mnt/share/tests (one test name per line; dev/vm/guest/tests/<name>.sh), the
#           binaries, images and packaging under /mnt/share.
# Emits:    one line per test to /mnt/share/out/results: `PASS|FAIL|SKIP <name> (<secs>s) …`;
#           progress on the console; powers the guest off at the end. A test that powers the
#           guest off itself (shutdown) writes its own result from its verdict unit.
set -u
S=/mnt/share
OUT=$S/out
. "$S/guest/lib.sh"

date -u +%FT%TZ >"$OUT/booted"
{
	echo "kernel: $(uname -r)"
	echo "systemd: $(systemctl --version | head -n1)"
	echo "cgroup fs: $(stat -fc %T /sys/fs/cgroup)"
	echo "controllers: $(cat /sys/fs/cgroup/cgroup.controllers)"
	echo "containerd: $(containerd --version)"
	echo "runc: $(runc --version | head -n1)"
	echo "boot: $(systemd-analyze 2>/dev/null | head -n1)"
} >"$OUT/facts" 2>&1
say "guest up: $(tr '\n' ';' <"$OUT/facts")"

node_network
# A live view for a hung test: the journal's tail in the share every 20 s (dev/vm.sh --keep).
(while sleep 20; do journalctl -b --no-pager -n 300 -o short-monotonic >"$OUT/live.journal.tmp" 2>&1 &&
	mv -f "$OUT/live.journal.tmp" "$OUT/live.journal"; done) &
# Each test gets at most this long (a hung test fails; it does not stall the whole run).
TEST_TIMEOUT=$(cat "$S/test-timeout" 2>/dev/null || echo 900)
while read -r t; do
	[[ -n $t ]] || continue
	say "=== RUN $t"
	t0=$SECONDS
	timeout -k 10 "$TEST_TIMEOUT" bash "$S/guest/tests/$t.sh" 2>&1 | tee "$OUT/$t.log" | sed -u "s/^/[$t] /" >/dev/console
	rc=${PIPESTATUS[0]}
	if ((rc == 124 || rc == 137)); then
		echo "FAIL: timed out after ${TEST_TIMEOUT}s" >>"$OUT/$t.log"
	fi
	secs=$((SECONDS - t0))
	journalctl -b --no-pager -o short-monotonic >"$OUT/$t.journal" 2>&1
	case $rc in
	0) verdict=PASS ;;
	77) verdict=SKIP ;;
	*) verdict=FAIL ;;
	esac
	reason=$(grep -E '^(FAIL|SKIP): ' "$OUT/$t.log" | tail -n1 || true)
	echo "$verdict $t (${secs}s) ${reason}" >>"$OUT/results"
	sync
	say "=== $verdict $t (${secs}s) $reason"
	reset_node
done <"$S/tests"
say "all guest tests ran; powering off"
sync
systemctl poweroff --no-block
