#!/usr/bin/env bash
# Stop the Ray head that scripts/ray-up.sh started under DIR, and only it: the processes whose
# environment carries J2C_RAY_HEAD=DIR (the head, its workers, its job drivers), or that belong to
# its session. Not `ray stop`, which stops every Ray process on the machine. SIGTERM first, then
# SIGKILL after a grace.
set -uo pipefail

[[ $# -eq 1 ]] || { echo "usage: $0 DIR" >&2; exit 1; }
[[ -d "$1" ]] || exit 0
DIR=$(cd "$1" && pwd)
MARK="J2C_RAY_HEAD=$DIR"

ours() { # pids of this head's processes still running (zombies excluded)
    local head sid proc pid stat
    head=$(cat "$DIR/head.pid" 2>/dev/null || true)
    for proc in /proc/[0-9]*; do
        pid=${proc#/proc/}
        [[ "$pid" == "$$" ]] && continue
        stat=$(cat "$proc/stat" 2>/dev/null) || continue
        stat=${stat##*) }
        [[ "${stat:0:1}" == Z ]] && continue
        sid=$(awk '{print $4}' <<<"$stat")
        if [[ -n "$head" && "$sid" == "$head" ]] ||
            { tr '\0' '\n' <"$proc/environ"; } 2>/dev/null | grep -qxF "$MARK"; then
            echo "$pid"
        fi
    done
}

pids=$(ours)
[[ -n "$pids" ]] && kill -TERM $pids 2>/dev/null
for _ in $(seq 1 50); do
    pids=$(ours)
    [[ -z "$pids" ]] && break
    sleep 0.1
done
[[ -n "$pids" ]] && kill -KILL $pids 2>/dev/null
temp=$(cat "$DIR/temp" 2>/dev/null || true)
[[ -n "$temp" && "$temp" == /tmp/j2c-ray-* ]] && rm -rf "$temp"
rm -f "$DIR/env"
exit 0
