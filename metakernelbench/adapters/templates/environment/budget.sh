# The attempt's remaining budget in the shell prompt (sourced by every interactive bash).
# The judge holds the budget: the first prompt asks it once (`submit --status --json`) and keeps the
# deadline and the submissions left in a small cache; later prompts count the minutes down locally,
# and `submit` clears the cache so the next prompt asks again.
MKB_BUDGET_CACHE=${MKB_BUDGET_CACHE:-/tmp/.mkb-budget}

_mkb_budget() {
    local now deadline left total answer minutes
    now=$(date +%s)
    if [ ! -s "$MKB_BUDGET_CACHE" ]; then
        answer=$(timeout 5 submit --status --json 2>/dev/null) || { printf 'budget unknown'; return; }
        printf '%s' "$answer" | python -c '
import json, sys, time
d = json.load(sys.stdin)
m = d.get("minutes_left")
print("-" if m is None else int(time.time() + 60 * m), d["submissions_left"], d["budget"])
' > "$MKB_BUDGET_CACHE" 2>/dev/null || { rm -f "$MKB_BUDGET_CACHE"; printf 'budget unknown'; return; }
    fi
    read -r deadline left total < "$MKB_BUDGET_CACHE"
    if [ "$deadline" = "-" ]; then
        printf '%s of %s submissions left' "$left" "$total"
        return
    fi
    minutes=$(( (deadline - now) / 60 ))
    [ "$minutes" -lt 0 ] && minutes=0
    printf '%s min, %s of %s submissions left' "$minutes" "$left" "$total"
}

PS1='[$(_mkb_budget)] \w\$ '
