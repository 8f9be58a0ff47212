# dev/vm/guest/shutdown-verdict.sh: ExecStop of shutdown-verdict.service (tests/shutdown.sh).
# systemd stops it when logind let the shutdown proceed (the kubelet released its delay lock or
# the delay ran out), before the kubelet and the API server it is ordered after.
#
# Owns:     the `shutdown` line of /mnt/share/out/results, out/shutdown.verdict.
# Receives: out/shutdown.start (when `systemctl poweroff` was called), the pods in the API.
# Emits:    PASS when every pod ended as upstream ends it (the SIGTERM-ignoring one Failed /
#           Terminated with upstream's message, the ones exiting 0 Succeeded), each with the
#           DisruptionTarget condition, the groups stopped lowest priority first, and the lock
#           was released after the SIGTERM-ignoring pod's budget and within the grace period.
# shellcheck shell=bash
. /mnt/share/guest/lib.sh
set -u
MESSAGE="Pod was terminated in response to imminent node shutdown."
SLACK=${SHUTDOWN_SLACK:-15}
now=$(date +%s.%N)
start=$(cat "$OUT/shutdown.start")
elapsed=$(awk -v a="$start" -v b="$now" 'BEGIN { printf "%.1f", b - a }')
problems=()
{
	echo "lock released ${elapsed}s after systemctl poweroff"
	pods=$(acurl -sf --max-time 10 "$API/api/v1/namespaces/default/pods") || problems+=("the API server did not answer")
	declare -A fin
	for p in low mid critical; do
		j=$(jq -c --arg n "$p" '.items[] | select(.metadata.name == $n)' <<<"$pods")
		echo "$p: $(jq -c '{phase: .status.phase, reason: .status.reason, message: .status.message, conditions: [.status.conditions[]? | select(.type == "DisruptionTarget") | {status, reason}], state: .status.containerStatuses[0].state}' <<<"$j")"
		# "low" ignores SIGTERM and is killed (137): Failed with the shutdown reason and message.
		# "mid" and "critical" exit 0 on SIGTERM: upstream's getPhase makes a terminal pod whose
		# containers all succeeded Succeeded, and a phase other than the one the shutdown set
		# (Failed) keeps no reason or message; the DisruptionTarget condition stays.
		if [[ $p == low ]]; then
			want_phase=Failed want_reason=Terminated want_message=$MESSAGE
		else
			want_phase=Succeeded want_reason=null want_message=null
		fi
		[[ $(jq -r .status.phase <<<"$j") == "$want_phase" ]] || problems+=("$p phase $(jq -r .status.phase <<<"$j"), want $want_phase")
		[[ $(jq -r .status.reason <<<"$j") == "$want_reason" ]] || problems+=("$p reason $(jq -r .status.reason <<<"$j"), want $want_reason")
		[[ $(jq -r .status.message <<<"$j") == "$want_message" ]] || problems+=("$p message '$(jq -r .status.message <<<"$j")', want '$want_message'")
		jq -e '.status.conditions[]? | select(.type == "DisruptionTarget" and .status == "True" and .reason == "TerminationByKubelet")' <<<"$j" >/dev/null ||
			problems+=("$p has no DisruptionTarget/TerminationByKubelet condition")
		f=$(jq -r '.status.containerStatuses[0].state.terminated.finishedAt // empty' <<<"$j")
		if [[ -z $f ]]; then
			problems+=("$p's container has no terminated state")
		else
			fin[$p]=$(date -d "$f" +%s)
		fi
	done
	if [[ -n ${fin[low]:-} && -n ${fin[mid]:-} && -n ${fin[critical]:-} ]]; then
		((fin[low] <= fin[mid] && fin[mid] <= fin[critical])) ||
			problems+=("stop order low=${fin[low]} mid=${fin[mid]} critical=${fin[critical]} is not lowest priority first")
	fi
	ready=$(acurl -sf --max-time 10 "$API/api/v1/nodes/$NODE" | jq -c '.status.conditions[] | select(.type == "Ready") | {status, message}')
	echo "node Ready: $ready"
	[[ $(jq -r .status <<<"$ready") == False ]] || problems+=("Node Ready is not False during shutdown: $ready")
	# "low" ignores SIGTERM, so its group takes (nearly) its whole budget; the three groups must
	# end within the total grace period (plus slack for this emulated machine).
	awk -v e="$elapsed" -v b="$SHUTDOWN_BUDGET" 'BEGIN { exit !(e >= b - 4) }' || problems+=("lock released after ${elapsed}s, before the SIGTERM-ignoring pod's budget (~$((SHUTDOWN_BUDGET - 3))s)")
	awk -v e="$elapsed" -v m=$((3 * SHUTDOWN_BUDGET + SLACK)) 'BEGIN { exit !(e <= m) }' || problems+=("lock released after ${elapsed}s, past the grace period $((3 * SHUTDOWN_BUDGET))s + ${SLACK}s")
	journalctl -u kubelet --no-pager -o short-monotonic >"$OUT/shutdown.kubelet-journal" 2>&1
	for p in "${problems[@]}"; do echo "problem: $p"; done
} >"$OUT/shutdown.verdict" 2>&1
sed 's/^/[shutdown verdict] /' "$OUT/shutdown.verdict" >/dev/console
secs=$(awk -v a="$start" -v b="$now" 'BEGIN { printf "%d", b - a }')
if ((${#problems[@]} == 0)); then
	echo "PASS shutdown (lock released ${elapsed}s after poweroff)" >>"$OUT/results"
else
	echo "FAIL shutdown (${secs}s) FAIL: ${problems[0]} (+$((${#problems[@]} - 1)) more: out/shutdown.verdict)" >>"$OUT/results"
fi
sync
