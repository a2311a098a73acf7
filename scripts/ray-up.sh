#!/usr/bin/env bash
# Start a throw-away one-node Ray head for the tests and benchmarks/ray.py, under DIR. Prints
# `export` lines (also kept in DIR/env): j2c's own setting J2C_SCHEDULER__RAY__ADDRESS, so
# `eval "$(scripts/ray-up.sh DIR)"` is all `j2c submit --scheduler ray` needs, plus J2C_RAY_BIN
# (Ray's venv), J2C_RAY_GCS and J2C_RAY_DIR. Stop it with scripts/ray-down.sh DIR.
#
#   scripts/ray-up.sh DIR
#
# Ray runs from its own virtual environment, .ray-venv (git-ignored; `ray[default]` is ~400 MB
# and brings its own pins, so it stays out of the project's .venv), made from
# scripts/ray-requirements.txt and re-made only when that file (or python3) changes. Like the
# platform image, that Python has j2c-unpack on its PATH: the checkout is put on its path (a .pth
# file) with a j2c-unpack console script beside `ray`; unpack needs only pydantic (Ray's own)
# and zstandard. The head runs with that bin folder first on its PATH, so every job's
# entrypoint finds this checkout's j2c-unpack (docs/ray.md).
#
# The head has 2 CPUs, 1 GPU (fake: Ray only counts it) and one `accelerator_type:FAKE`
# resource; its dashboard listens on 127.0.0.1 only. Every port but one is Ray's own choice
# (port 0), so two heads never race for those; the dashboard's and the GCS's are read back from
# the head's own log. Ray refuses port 0 for its client server: that port is picked free here,
# and as another process can take it before Ray binds it, a head that exits before its
# dashboard answers is started again on another one (3 tries).
#
# The head runs under `ray start --block` in a session of its own (setsid), with
# J2C_RAY_HEAD=DIR in its environment: every process it starts (GCS, raylet, dashboard, workers,
# job drivers) inherits that mark, so scripts/ray-down.sh stops exactly these processes and never
# another Ray on this machine (`ray stop` would stop them all).
#
# Exit codes: 0 up, 2 Ray cannot be installed here (no package index, no venv module), 1 anything
# else.
set -euo pipefail

[[ $# -eq 1 ]] || { echo "usage: $0 DIR" >&2; exit 1; }
REPO=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$1"
DIR=$(cd "$1" && pwd)
VENV=${J2C_RAY_VENV:-$REPO/.ray-venv}
REQUIREMENTS=$REPO/scripts/ray-requirements.txt
log() { echo "ray-up: $*" >&2; }

# ---------------------------------------------------------------- .ray-venv (cached)
want=$({ cat "$REQUIREMENTS"; python3 --version; } | sha256sum | cut -d' ' -f1)
if [[ "$(cat "$VENV/.j2c-deps" 2>/dev/null)" != "$want" ]]; then
    log "installing Ray into $VENV (about a minute)"
    rm -rf "$VENV"
    if ! python3 -m venv "$VENV" >"$DIR/install.log" 2>&1 ||
        ! "$VENV/bin/pip" install -q -r "$REQUIREMENTS" >>"$DIR/install.log" 2>&1; then
        log "cannot install Ray here: $(grep -v 'is ignored: it is neither' "$DIR/install.log" |
            tail -1)"
        rm -rf "$VENV"
        exit 2
    fi
    echo "$want" >"$VENV/.j2c-deps"
fi
site=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
echo "$REPO" >"$site/j2c-checkout.pth"
cat >"$VENV/bin/j2c-unpack" <<PY
#!$VENV/bin/python
import sys
from j2c_server.unpack.__main__ import main
sys.exit(main())
PY
chmod +x "$VENV/bin/j2c-unpack"

# ---------------------------------------------------------------- the head
bash "$REPO/scripts/ray-down.sh" "$DIR" # a head an earlier run left here
strip() { sed -e 's/\x1b\[[0-9;]*m//g' "$DIR/head.log"; }

start_head() {
    # Ray's own sockets live under its temp dir; their paths must stay under 107 bytes.
    local temp client
    temp=$(mktemp -d /tmp/j2c-ray-XXXXXX)
    echo "$temp" >"$DIR/temp"
    client=$("$VENV/bin/python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])')
    (
        export J2C_RAY_HEAD="$DIR" RAY_USAGE_STATS_ENABLED=0 PATH="$VENV/bin:$PATH"
        exec setsid "$VENV/bin/ray" start --head --block --disable-usage-stats \
            --num-cpus 2 --num-gpus 1 --resources '{"accelerator_type:FAKE": 1}' \
            --node-ip-address 127.0.0.1 --port 0 \
            --dashboard-host 127.0.0.1 --dashboard-port 0 \
            --ray-client-server-port "$client" --dashboard-agent-listen-port 0 \
            --dashboard-agent-grpc-port 0 --metrics-export-port 0 \
            --runtime-env-agent-port 0 --node-manager-port 0 --object-manager-port 0 \
            --min-worker-port 0 --max-worker-port 0 --temp-dir "$temp"
    ) >"$DIR/head.log" 2>&1 &
    echo $! >"$DIR/head.pid"
}

wait_head() { # 0: the dashboard answers; 1: the head exited; 2: no answer in 120 s
    local address=""
    for _ in $(seq 1 240); do
        if [[ -z "$address" ]]; then
            address=$(strip | grep -oE "RAY_API_SERVER_ADDRESS='http://[^']+'" | head -1 |
                cut -d"'" -f2 || true)
        fi
        if [[ -n "$address" ]] && curl -fsS "$address/api/version" >/dev/null 2>&1; then
            gcs=$(strip | grep -oE "ray start --address='[^']+'" | head -1 | cut -d"'" -f2)
            ADDRESS=$address
            return 0
        fi
        kill -0 "$(cat "$DIR/head.pid")" 2>/dev/null || return 1
        sleep 0.5
    done
    return 2
}

ADDRESS="" gcs=""
for try in 1 2 3; do
    start_head
    if wait_head; then
        cat >"$DIR/env" <<ENV
export J2C_SCHEDULER__RAY__ADDRESS=$ADDRESS
export J2C_RAY_GCS=$gcs
export J2C_RAY_BIN=$VENV/bin
export J2C_RAY_DIR=$DIR
ENV
        cat "$DIR/env"
        exit 0
    else
        why=$?
    fi
    bash "$REPO/scripts/ray-down.sh" "$DIR"
    if [[ $why -eq 2 ]]; then
        log "the dashboard did not answer in 120 s; see $DIR/head.log"
        exit 1
    fi
    log "the head exited before its dashboard answered (try $try of 3):"
    tail -5 "$DIR/head.log" >&2
    cp "$DIR/head.log" "$DIR/head.$try.log"
done
exit 1
