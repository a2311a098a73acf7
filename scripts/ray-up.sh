#!/usr/bin/env bash
# Start a throw-away one-node Ray head for the tests and benchmarks/ray.py, under DIR.
#
#   scripts/ray-up.sh DIR      start it; prints DIR/env (J2C_RAY_ADDRESS=..., J2C_RAY_BIN=...)
#
# Ray runs from its own virtual environment, .ray-venv (git-ignored; `ray[default]` is ~400 MB
# and brings its own pins, so it stays out of the project's .venv), made here when missing.
# Like the platform image, that Python has j2c-unpack on its PATH: the checkout is put on its
# path (a .pth file) with a j2c-unpack console script beside `ray`; unpack needs only
# pydantic (Ray's own) and zstandard.
#
# The head runs under `ray start --block` in a session of its own (setsid), with
# J2C_RAY_HEAD=DIR in its environment: every process it starts (GCS, raylet, dashboard, workers,
# job drivers) inherits that mark, so scripts/ray-down.sh stops exactly these processes and never
# another Ray on this machine (`ray stop` would stop them all).
# Exit 2: Ray cannot be installed here (no package index reachable).
set -euo pipefail

[[ $# -eq 1 ]] || { echo "usage: $0 DIR" >&2; exit 1; }
REPO=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$1"
DIR=$(cd "$1" && pwd)
VENV=${J2C_RAY_VENV:-$REPO/.ray-venv}
# Ray's own sockets live under its temp dir; their paths must stay under 107 bytes.
TEMP=$(mktemp -d /tmp/j2c-ray-XXXXXX)

if [[ ! -x "$VENV/bin/ray" ]]; then
    python3 -m venv "$VENV"
    if ! "$VENV/bin/pip" install -q "ray[default]" zstandard >"$DIR/install.log" 2>&1; then
        echo "ray-up: cannot install ray[default] (see $DIR/install.log)" >&2
        exit 2
    fi
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

free_ports() { # n: n distinct free TCP ports on 127.0.0.1
    "$VENV/bin/python" - "$1" <<'PY'
import socket, sys
socks = [socket.socket() for _ in range(int(sys.argv[1]))]
for s in socks:
    s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in socks))
for s in socks:
    s.close()
PY
}
read -r gcs dash client agent agent_grpc metrics rtenv nodem objm <<<"$(free_ports 9)"
base=$(( (RANDOM % 200) * 100 + 30000 )) # 100 worker ports of their own (another head: others)

echo "$TEMP" >"$DIR/temp"
(
    export J2C_RAY_HEAD="$DIR" RAY_USAGE_STATS_ENABLED=0 PATH="$VENV/bin:$PATH"
    exec setsid "$VENV/bin/ray" start --head --block --disable-usage-stats \
        --num-cpus 2 --num-gpus 1 --resources '{"accelerator_type:FAKE": 1}' \
        --node-ip-address 127.0.0.1 --port "$gcs" \
        --dashboard-host 127.0.0.1 --dashboard-port "$dash" \
        --ray-client-server-port "$client" --dashboard-agent-listen-port "$agent" \
        --dashboard-agent-grpc-port "$agent_grpc" --metrics-export-port "$metrics" \
        --runtime-env-agent-port "$rtenv" --node-manager-port "$nodem" \
        --object-manager-port "$objm" --min-worker-port "$base" --max-worker-port $((base + 99)) \
        --temp-dir "$TEMP"
) >"$DIR/head.log" 2>&1 &
echo $! >"$DIR/head.pid"

address="http://127.0.0.1:$dash"
for _ in $(seq 1 240); do
    if curl -fsS "$address/api/jobs/" >/dev/null 2>&1; then
        cat >"$DIR/env" <<ENV
J2C_RAY_ADDRESS=$address
J2C_RAY_GCS=127.0.0.1:$gcs
J2C_RAY_BIN=$VENV/bin
J2C_RAY_TEMP=$TEMP
ENV
        cat "$DIR/env"
        exit 0
    fi
    if ! kill -0 "$(cat "$DIR/head.pid")" 2>/dev/null; then
        echo "ray-up: the head exited; see $DIR/head.log" >&2
        tail -20 "$DIR/head.log" >&2
        exit 1
    fi
    sleep 0.5
done
echo "ray-up: the dashboard did not answer at $address in 120 s; see $DIR/head.log" >&2
bash "$REPO/scripts/ray-down.sh" "$DIR"
exit 1
