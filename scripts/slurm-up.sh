#!/usr/bin/env bash
# Start a throw-away single-node Slurm 22.05 (slurmctld, slurmd, slurmrestd with JWT auth, munge)
# with two fake GPUs, everything under DIR. Prints `export` lines of j2c's own settings
# (J2C_SCHEDULER__SLURM__..., also kept in DIR/env): `eval "$(scripts/slurm-up.sh DIR)"` is all
# `j2c submit --scheduler slurm` needs. Works as root in a container without systemd; stop it with scripts/slurm-down.sh DIR.
#
#   scripts/slurm-up.sh DIR                 install Slurm if missing, start everything
#   scripts/slurm-up.sh DIR --restrd-only   (re)start only slurmrestd, on its old port
#
# J2C_SLURM_NODES=N (opt-in, default 1) starts N slurmd daemons on this machine, nodes
# j2c1..j2cN on ports of their own (Debian's Slurm is built with multiple-slurmd support), for
# multi-node jobs; the default is the one node "j2c" that the test suite uses.
#
# Exit codes: 0 up, 2 Slurm missing and not installable here (not root, no apt), 1 anything else.
set -euo pipefail

usage() { echo "usage: $0 DIR [--restrd-only]" >&2; exit 1; }
[[ $# -ge 1 && $# -le 2 ]] || usage
mkdir -p "$1"
DIR=$(cd "$1" && pwd)
RESTRD_ONLY=0
[[ "${2:-}" == "--restrd-only" ]] && RESTRD_ONLY=1
[[ -n "${2:-}" && $RESTRD_ONLY -eq 0 ]] && usage

log() { echo "slurm-up: $*" >&2; }
die() { # report, show the logs' ends, stop what this run started
    log "$*"
    for f in "$DIR"/log/*; do [[ -s "$f" ]] && { echo "== $f" && tail -n 5 "$f"; } >&2; done
    if [[ $RESTRD_ONLY -eq 1 ]]; then
        "$(dirname "$0")/slurm-down.sh" "$DIR" --restrd-only >&2
    else
        "$(dirname "$0")/slurm-down.sh" "$DIR" >&2
    fi
    exit 1
}

# ---------------------------------------------------------------- install (only when missing)
have_slurm() {
    command -v slurmctld >/dev/null && command -v slurmd >/dev/null &&
        command -v slurmrestd >/dev/null && command -v munged >/dev/null &&
        command -v scontrol >/dev/null && compgen -G "/usr/lib/*/slurm-wlm/auth_jwt.so" >/dev/null
}
PACKAGES=(slurmctld slurmd slurm-client slurmrestd munge slurm-wlm-jwt-plugin)
if ! have_slurm; then
    if [[ $(id -u) -ne 0 ]] || ! command -v apt-get >/dev/null; then
        log "Slurm is not installed and cannot be installed here (needs root and apt-get)"
        exit 2
    fi
    log "installing ${PACKAGES[*]}"
    export DEBIAN_FRONTEND=noninteractive
    # Update the package lists only when the install fails without it (saves ~10 s).
    if ! apt-get install -y --no-install-recommends "${PACKAGES[@]}" >&2; then
        apt-get update >&2 && apt-get install -y --no-install-recommends "${PACKAGES[@]}" >&2 || {
            log "apt-get install failed"; exit 2; }
    fi
fi
[[ $(id -u) -eq 0 ]] || { log "the throw-away Slurm must be started as root"; exit 2; }

CONF="$DIR/etc/slurm.conf"
RUN="$DIR/run"

start_daemon() { # name, command...: detached (own session), pid in DIR/run, console in DIR/log
    local name=$1; shift
    setsid "$@" </dev/null >>"$DIR/log/$name.out" 2>&1 &
    echo $! >"$RUN/$name.pid"
}

wait_port() { # port, what: poll until it accepts connections (at most 10 s)
    local i
    for ((i = 0; i < 200; i++)); do
        if (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; then return 0; fi
        sleep 0.05
    done
    die "$2 did not listen on 127.0.0.1:$1"
}

start_restd() {
    # slurmrestd refuses to run as root; it only forwards the caller's token (rest_auth/jwt), and
    # SLURM_JWT=daemon makes it talk to slurmctld with those tokens instead of munge.
    start_daemon slurmrestd env -u SLURM_JWT SLURM_JWT=daemon SLURM_CONF="$CONF" \
        slurmrestd -f "$CONF" -a rest_auth/jwt -s openapi/v0.0.38 -u slurm \
        "127.0.0.1:$RESTD_PORT"
    wait_port "$RESTD_PORT" slurmrestd
}

if [[ $RESTRD_ONLY -eq 1 ]]; then
    [[ -f "$DIR/env" ]] || { log "$DIR holds no running Slurm (no $DIR/env)"; exit 1; }
    RESTD_PORT=$(sed -n 's/^RESTD_PORT=//p' "$RUN/ports")
    pid=$(cat "$RUN/slurmrestd.pid" 2>/dev/null || true)
    # Running, and not a zombie that a slow init has yet to reap.
    if [[ -n "$pid" ]] && ! grep -qs '^State:[[:space:]]*Z' "/proc/$pid/status" &&
        kill -0 "$pid" 2>/dev/null; then
        log "slurmrestd already runs (pid $pid)"
    else
        start_restd
    fi
    cat "$DIR/env"
    exit 0
fi

if [[ -f "$RUN/slurmctld.pid" ]] && kill -0 "$(cat "$RUN/slurmctld.pid")" 2>/dev/null; then
    log "a Slurm already runs in $DIR; stop it first with scripts/slurm-down.sh $DIR"
    exit 1
fi

# ---------------------------------------------------------------- layout
# slurmrestd runs as user slurm and must read slurm.conf: DIR and etc/ stay traversable.
chmod 755 "$DIR"
mkdir -p "$DIR"/{etc,state/ctld,state/d,log,run,jwt,munge/sock,dev,jobs}
chmod 755 "$DIR/etc" "$DIR/munge" "$DIR/munge/sock"
chmod 700 "$DIR/jwt" "$DIR/state"
rm -f "$DIR"/log/*

NODES=${J2C_SLURM_NODES:-1}
[[ "$NODES" =~ ^[1-8]$ ]] || { log "J2C_SLURM_NODES must be 1 to 8, not '$NODES'"; exit 1; }
read -r CTLD_PORT SLURMD_PORT RESTD_PORT NODE_PORTS < <(python3 - "$NODES" <<'EOF'
import socket, sys
socks = [socket.socket() for _ in range(3 + int(sys.argv[1]))]
for s in socks:
    s.bind(("127.0.0.1", 0))
print(*(s.getsockname()[1] for s in socks))
EOF
)
read -r -a NODE_PORTS <<<"$NODE_PORTS"
printf 'CTLD_PORT=%s\nSLURMD_PORT=%s\nRESTD_PORT=%s\n' "$CTLD_PORT" "$SLURMD_PORT" "$RESTD_PORT" \
    >"$RUN/ports"

# Fake GPUs: character devices (what gres.conf File= needs; Count= alone drains the node).
GPU_FILES=()
for i in 0 1; do
    rm -f "$DIR/dev/gpu$i"
    if mknod "$DIR/dev/gpu$i" c 1 3 2>/dev/null; then
        GPU_FILES+=("$DIR/dev/gpu$i")
    fi
done
[[ ${#GPU_FILES[@]} -eq 2 ]] || GPU_FILES=(/dev/null /dev/zero)

CPUS=$(nproc)
((CPUS < 4)) && CPUS=4
MEM_MB=$(awk '/^MemTotal:/ { printf "%d", $2 / 1024 }' /proc/meminfo)
# One node "j2c" by default; with J2C_SLURM_NODES=N, j2c1..j2cN, each with its own slurmd port,
# spool, pid and log file (%n: the node's name), all on 127.0.0.1.
if ((NODES == 1)); then
    NODE_NAMES=(j2c)
    NODE_LINES="NodeName=j2c NodeAddr=127.0.0.1 NodeHostname=localhost CPUs=$CPUS RealMemory=$MEM_MB Gres=gpu:fake:2 State=UNKNOWN"
    PARTITION_NODES=j2c
    SLURMD_FILES="SlurmdSpoolDir=$DIR/state/d
SlurmdPidFile=$RUN/slurmd.daemon.pid
SlurmdLogFile=$DIR/log/slurmd.log"
else
    NODE_NAMES=()
    NODE_LINES=""
    for ((i = 1; i <= NODES; i++)); do
        NODE_NAMES+=("j2c$i")
        NODE_LINES+="NodeName=j2c$i NodeAddr=127.0.0.1 NodeHostname=localhost Port=${NODE_PORTS[i - 1]} CPUs=$CPUS RealMemory=$((MEM_MB / NODES)) Gres=gpu:fake:2 State=UNKNOWN
"
    done
    PARTITION_NODES="j2c[1-$NODES]"
    SLURMD_FILES="SlurmdSpoolDir=$DIR/state/d/%n
SlurmdPidFile=$RUN/slurmd.%n.daemon.pid
SlurmdLogFile=$DIR/log/slurmd.%n.log"
fi

[[ -f "$DIR/munge/munge.key" ]] || mungekey --create --keyfile="$DIR/munge/munge.key"
chmod 600 "$DIR/munge/munge.key"
[[ -f "$DIR/jwt/jwt_hs256.key" ]] || head -c 32 /dev/urandom >"$DIR/jwt/jwt_hs256.key"
chmod 600 "$DIR/jwt/jwt_hs256.key"

cat >"$CONF" <<EOF
# Generated by scripts/slurm-up.sh: a throw-away single-node cluster for j2c's tests.
ClusterName=j2c
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$DIR/munge/sock/munge.socket.2
AuthAltTypes=auth/jwt
AuthAltParameters=jwt_key=$DIR/jwt/jwt_hs256.key
CredType=cred/munge
StateSaveLocation=$DIR/state/ctld
SlurmctldPidFile=$RUN/slurmctld.daemon.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
$SLURMD_FILES
# No cgroups in a container: track processes by parentage, no task binding, no accounting.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SwitchType=switch/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
# Without a default, every job would take the whole node's memory.
DefMemPerCPU=500
# Start batch jobs at once instead of after the default ~3 s.
SchedulerParameters=batch_sched_delay=0
SchedulerType=sched/backfill
MailProg=/bin/true
ReturnToService=2
KillWait=2
MinJobAge=300
SlurmdParameters=config_overrides
GresTypes=gpu
# Preemption by partition: a job of "urgent" cancels (PREEMPTED) the jobs of "spot" whose
# resources it needs, as a cluster's preemptible partition does; "debug" is never preempted.
PreemptType=preempt/partition_prio
PreemptMode=CANCEL
$NODE_LINES
PartitionName=debug Nodes=$PARTITION_NODES Default=YES MaxTime=INFINITE State=UP PriorityTier=1 PreemptMode=OFF
PartitionName=spot Nodes=$PARTITION_NODES MaxTime=INFINITE State=UP PriorityTier=1 PreemptMode=CANCEL
PartitionName=urgent Nodes=$PARTITION_NODES MaxTime=INFINITE State=UP PriorityTier=100 PreemptMode=OFF
EOF
{
    echo "AutoDetect=off"
    for node in "${NODE_NAMES[@]}"; do
        echo "NodeName=$node Name=gpu Type=fake File=${GPU_FILES[0]}"
        echo "NodeName=$node Name=gpu Type=fake File=${GPU_FILES[1]}"
    done
} >"$DIR/etc/gres.conf"
for node in "${NODE_NAMES[@]}"; do
    ((NODES == 1)) || mkdir -p "$DIR/state/d/$node"
done
chmod 644 "$CONF" "$DIR/etc/gres.conf"
if command -v runuser >/dev/null && ! runuser -u slurm -- test -r "$CONF"; then
    log "user slurm (slurmrestd runs as slurm) cannot read $CONF: choose a DIR whose parent"
    log "folders others may enter (e.g. under /tmp, not under a mode-700 folder)"
    exit 1
fi

# ---------------------------------------------------------------- start
# A SLURM_JWT=<token> in the daemons' environment makes slurmctld die: never pass one on.
unset SLURM_JWT
export SLURM_CONF="$CONF"

munged --force --key-file="$DIR/munge/munge.key" --socket="$DIR/munge/sock/munge.socket.2" \
    --pid-file="$RUN/munged.pid" --log-file="$DIR/log/munged.log" \
    --seed-file="$DIR/munge/munged.seed" </dev/null >/dev/null 2>&1 || die "munged did not start"
start_daemon slurmctld slurmctld -D -i -f "$CONF"
for node in "${NODE_NAMES[@]}"; do # pid files slurmd.pid, slurmd-j2c2.pid, ...
    name=slurmd
    [[ "$node" == j2c || "$node" == j2c1 ]] || name="slurmd-$node"
    start_daemon "$name" slurmd -D -N "$node" -f "$CONF"
done
start_restd
wait_port "$CTLD_PORT" slurmctld

# Every node must be idle (slurmd registered, GPUs known) before jobs can run.
for node in "${NODE_NAMES[@]}"; do
    for ((i = 0; i < 200; i++)); do
        state=$(timeout 5 sinfo -h -n "$node" -o %T 2>/dev/null || true)
        [[ "$state" == "idle" ]] && break
        sleep 0.05
    done
    [[ "$state" == "idle" ]] || die "node $node is '${state:-unknown}', not idle"
done

TOKEN=$(timeout 10 scontrol token username=root lifespan=604800 | sed -n 's/^SLURM_JWT=//p')
[[ -n "$TOKEN" ]] || die "scontrol token returned no token"
(umask 077 && printf '%s\n' "$TOKEN" >"$DIR/jwt/token")

# What the node's jobs need to find j2c-unpack: this checkout's venv (or wherever it is on PATH).
REPO=$(cd "$(dirname "$0")/.." && pwd)
UNPACK=$(command -v j2c-unpack || true)
[[ -z "$UNPACK" && -x "$REPO/.venv/bin/j2c-unpack" ]] && UNPACK="$REPO/.venv/bin/j2c-unpack"
[[ -n "$UNPACK" ]] || log "j2c-unpack is not on PATH: jobs will not find it (run make setup)"
JOB_PATH="${UNPACK:+$(dirname "$UNPACK"):}/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

# j2c's own setting names: `eval "$(scripts/slurm-up.sh DIR)"`, then `j2c submit --scheduler
# slurm`. The node is this machine, so a file:// store is seen there: storage.shared.
# J2C_SLURM_DIR is not a setting: it says where this cluster lives (slurm-down.sh, the tests).
cat >"$DIR/env" <<EOF
export J2C_SLURM_DIR=$DIR
export SLURM_CONF=$CONF
export J2C_SCHEDULER__SLURM__URL=http://127.0.0.1:$RESTD_PORT
export J2C_SCHEDULER__SLURM__USER=root
export J2C_SCHEDULER__SLURM__TOKEN_FILE=$DIR/jwt/token
export J2C_SCHEDULER__SLURM__JOB_DIR=$DIR/jobs
export J2C_SCHEDULER__SLURM__ENV__PATH=$JOB_PATH
export J2C_STORAGE__SHARED=true
EOF
cat "$DIR/env"
log "up in $DIR (slurmrestd on 127.0.0.1:$RESTD_PORT)"
