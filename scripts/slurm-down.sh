#!/usr/bin/env bash
# Stop the throw-away Slurm that scripts/slurm-up.sh started under DIR: only its own processes,
# found by the pid files in DIR/run and by open files inside DIR (job steps and their jobs).
# SIGTERM first, SIGKILL for whatever is still there after a short grace (a stuck slurmd ignores
# SIGTERM).
#
#   scripts/slurm-down.sh DIR                 stop everything
#   scripts/slurm-down.sh DIR --restrd-only   stop only slurmrestd (to test an outage)
set -uo pipefail

[[ $# -ge 1 && $# -le 2 ]] || { echo "usage: $0 DIR [--restrd-only]" >&2; exit 1; }
[[ -d "$1" ]] || exit 0
DIR=$(cd "$1" && pwd)
RUN="$DIR/run"
GRACE_STEPS=30 # x 0.1 s

alive() { # pid: running (a zombie waiting for a slow init to reap it counts as gone)
    local stat
    stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
    stat=${stat##*) }
    [[ "${stat:0:1}" != Z ]]
}

pids_of() { # names...: pids from DIR/run/<name>.pid that are still alive
    local name pid
    for name in "$@"; do
        pid=$(cat "$RUN/$name.pid" 2>/dev/null) || continue
        [[ "$pid" =~ ^[0-9]+$ ]] && alive "$pid" && echo "$pid"
    done
}

ppid_of() { # pid: its parent's pid
    local key value
    { while read -r key value _; do
        [[ "$key" == PPid: ]] && { echo "$value"; return; }
    done <"/proc/$1/status"; } 2>/dev/null
    echo 0
}

holders_of_dir() { # pids with an open file inside DIR, and their descendants (jobs under a
    # slurmstepd), never this script or its ancestors
    local keep=" " p=$$ pid ppid holders=" " changed=1
    while [[ "$p" -gt 1 ]]; do keep+="$p "; p=$(ppid_of "$p"); done
    while read -r p; do
        p=${p#/proc/}
        p=${p%%/*}
        [[ "$keep" == *" $p "* || "$holders" == *" $p "* ]] || holders+="$p "
    done < <(find /proc/[0-9]*/fd -maxdepth 1 -lname "$DIR/*" 2>/dev/null)
    declare -A parent=()
    while read -r pid ppid; do parent[$pid]=$ppid; done < <(
        awk '/^PPid:/ { split(FILENAME, part, "/"); print part[3], $2; nextfile }' \
            /proc/[0-9]*/status 2>/dev/null
    )
    while [[ $changed -eq 1 ]]; do
        changed=0
        for pid in "${!parent[@]}"; do
            if [[ "$holders" != *" $pid "* && "$keep" != *" $pid "* &&
                "$holders" == *" ${parent[$pid]} "* ]]; then
                holders+="$pid "
                changed=1
            fi
        done
    done
    printf '%s\n' $holders
}

stop() { # pids...: SIGTERM, wait for the grace, then SIGKILL the rest
    local pids=("$@") i left
    [[ ${#pids[@]} -gt 0 ]] || return 0
    kill -TERM "${pids[@]}" 2>/dev/null
    for ((i = 0; i < GRACE_STEPS; i++)); do
        left=()
        for p in "${pids[@]}"; do alive "$p" && left+=("$p"); done
        [[ ${#left[@]} -eq 0 ]] && return 0
        sleep 0.1
    done
    echo "slurm-down: SIGKILL for ${left[*]}" >&2
    kill -KILL "${left[@]}" 2>/dev/null
    return 0
}

if [[ "${2:-}" == "--restrd-only" ]]; then
    mapfile -t pids < <(pids_of slurmrestd)
    stop "${pids[@]}"
    rm -f "$RUN/slurmrestd.pid"
    exit 0
fi

# slurmd, and with J2C_SLURM_NODES=N the other nodes' slurmd-j2c2, ...
mapfile -t nodes < <(cd "$RUN" 2>/dev/null && for f in slurmd-*.pid; do [[ -f "$f" ]] && echo "${f%.pid}"; done)
mapfile -t daemons < <(pids_of slurmrestd slurmctld slurmd "${nodes[@]}" munged)
# Job steps (slurmstepd) and the jobs under them hold files in DIR (the slurmd log, job output):
# nothing of theirs is worth a grace period in a throw-away cluster.
mapfile -t holders < <(holders_of_dir)
others=()
for p in "${holders[@]}"; do # slurmctld's own helper (slurmscriptd) goes down with it
    [[ " ${daemons[*]} " == *" $p "* || " ${daemons[*]} " == *" $(ppid_of "$p") "* ]] ||
        others+=("$p")
done
[[ ${#others[@]} -gt 0 ]] && kill -KILL "${others[@]}" 2>/dev/null
# In order: slurmctld lingers for seconds when munge or slurmd vanish under it.
mapfile -t pids < <(pids_of slurmrestd slurmd "${nodes[@]}")
stop "${pids[@]}"
mapfile -t pids < <(pids_of slurmctld)
stop "${pids[@]}"
mapfile -t pids < <(pids_of munged)
stop "${pids[@]}"
mapfile -t late < <(holders_of_dir)
[[ ${#late[@]} -gt 0 ]] && kill -KILL "${late[@]}" 2>/dev/null
rm -f "$RUN"/*.pid
exit 0
