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

ours() { # pids of this head's processes still running: one pass over /proc (zombies excluded)
    local head marked
    head=$(cat "$DIR/head.pid" 2>/dev/null || echo none)
    marked=$(grep -lzxF "$MARK" /proc/[0-9]*/environ 2>/dev/null | cut -d/ -f3 | tr '\n' ' ')
    ps -eo pid=,sid=,stat= | awk -v head="$head" -v marked=" $marked" -v self="$$" '
        $1 != self && $3 !~ /^Z/ && ($2 == head || index(marked, " " $1 " ")) { print $1 }'
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
