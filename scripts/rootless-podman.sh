#!/usr/bin/env bash
# A rootless podman for the container tests run as a non-root user (scripts/test.sh's rootless
# leg): the engine and the server both that user's, as docs/operators.md recommends for a
# shared machine. Run as root, after scripts/platform-image.sh (its image is copied over).
#
#   scripts/rootless-podman.sh DIR IMAGE     set up and start; prints `export` lines (also kept
#                                            in DIR/env, as platform-image.sh does)
#   scripts/rootless-podman.sh DIR --stop    stop the service started in DIR
#
# What it does, each step only when missing: the user ($ROOTLESS_USER, default
# j2c-rootless) with a home; its subordinate uid and gid ranges (/etc/subuid, /etc/subgid);
# traverse rights for it (a POSIX ACL `u:USER:x`, nothing else) on the folders above this
# checkout and above the venv's interpreter that others cannot enter; its containers.conf
# (runc, cgroupfs, file events: no systemd here) and storage.conf (overlay); IMAGE copied from
# root's podman into its storage (podman save | podman load as the user); then `podman system
# service` as that user on DIR/podman.sock. DIR ends up the user's (0700).
#
# Exit codes: 0 up, 2 rootless podman cannot run here (not root, no newuidmap, no user
# namespaces), with the reason on stderr; 1 anything else.
set -euo pipefail

usage() { echo "usage: $0 DIR IMAGE | DIR --stop" >&2; exit 1; }
[[ $# -eq 2 ]] || usage
mkdir -p "$1"
DIR=$(cd "$1" && pwd)
ROOT_DIR=$(cd "$(dirname "$0")/.." && pwd)
RL_USER=${ROOTLESS_USER:-j2c-rootless}
log() { echo "rootless-podman: $*" >&2; }

if [[ "$2" == "--stop" ]]; then
    if [[ -s "$DIR/service.pid" ]]; then
        kill "$(cat "$DIR/service.pid")" 2>/dev/null || true
        rm -f "$DIR/service.pid"
    fi
    exit 0
fi
IMAGE=$2

[[ $(id -u) -eq 0 ]] || { log "needs root (it makes the user and its uid ranges)"; exit 2; }
for tool in podman newuidmap newgidmap runuser; do
    command -v "$tool" >/dev/null || { log "no $tool here"; exit 2; }
done
if [[ -r /proc/sys/user/max_user_namespaces && $(cat /proc/sys/user/max_user_namespaces) -eq 0 ]]; then
    log "user namespaces are off (user.max_user_namespaces = 0)"
    exit 2
fi
if ! command -v setfacl >/dev/null; then
    log "installing acl (setfacl)"
    DEBIAN_FRONTEND=noninteractive apt-get install -y acl >/dev/null 2>&1 || {
        log "setfacl is missing and acl cannot be installed"; exit 2; }
fi

# ---------------------------------------------------------------- the user and its ranges
if ! id "$RL_USER" >/dev/null 2>&1; then
    log "adding user $RL_USER"
    useradd --create-home --shell /bin/bash "$RL_USER"
fi
RL_HOME=$(getent passwd "$RL_USER" | cut -d: -f6)
for file in /etc/subuid /etc/subgid; do
    if ! grep -q "^$RL_USER:" "$file" 2>/dev/null; then
        # A range no other entry uses: past the highest one there.
        start=$(awk -F: 'BEGIN { top = 100000 } { if ($2 + $3 > top) top = $2 + $3 } END { print top }' \
            "$file" 2>/dev/null || echo 100000)
        echo "$RL_USER:$start:65536" >>"$file"
    fi
done

# ---------------------------------------------------------------- its way to the code
# The venv's interpreter may live under a folder others cannot enter (a pyenv under /root):
# the user gets traverse (x) on each such folder, and nothing more.
PY_HOME=$(sed -n 's/^home *= *//p' "$ROOT_DIR/.venv/pyvenv.cfg")
for target in "$ROOT_DIR/.venv" "$PY_HOME"; do
    folder=$target
    while [[ "$folder" != "/" ]]; do
        folder=$(dirname "$folder")
        if ! runuser -u "$RL_USER" -- test -x "$folder"; then
            setfacl -m "u:$RL_USER:x" "$folder"
        fi
    done
done
runuser -u "$RL_USER" -- "$ROOT_DIR/.venv/bin/python" -c "import j2c_server, pytest" || {
    log "$RL_USER cannot run this checkout's venv"; exit 1; }

# ---------------------------------------------------------------- its podman
as_user() {
    runuser -u "$RL_USER" -- env -i HOME="$RL_HOME" USER="$RL_USER" PATH=/usr/sbin:/usr/bin:/sbin:/bin \
        XDG_RUNTIME_DIR="$DIR/run" CONTAINERS_CONF="$DIR/containers.conf" "$@"
}
chown "$RL_USER": "$DIR"
chmod 700 "$DIR"
install -d -o "$RL_USER" -m 700 "$DIR/run"
cat >"$DIR/containers.conf" <<'EOF'
[containers]
default_ulimits = []
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
EOF
install -d -o "$RL_USER" "$RL_HOME/.config" "$RL_HOME/.config/containers"
if [[ ! -f "$RL_HOME/.config/containers/storage.conf" ]]; then
    printf '[storage]\ndriver = "overlay"\n' >"$RL_HOME/.config/containers/storage.conf"
    chown "$RL_USER": "$RL_HOME/.config/containers/storage.conf"
fi
if ! as_user podman info --format '{{.Host.Security.Rootless}}' >"$DIR/info.log" 2>&1 ||
    [[ $(tail -n 1 "$DIR/info.log") != true ]]; then
    log "podman does not run rootless as $RL_USER:"
    tail -n 5 "$DIR/info.log" >&2
    exit 2
fi
if ! as_user podman image exists "$IMAGE"; then
    log "copying $IMAGE into $RL_USER's storage"
    podman save "$IMAGE" | as_user podman load >/dev/null
fi

SOCKET="$DIR/podman.sock"
if [[ -s "$DIR/service.pid" ]] && kill -0 "$(cat "$DIR/service.pid")" 2>/dev/null; then
    log "API service already running"
else
    rm -f "$SOCKET"
    # The service writes its own pid (podman's, not runuser's): --stop ends exactly it.
    as_user setsid sh -c 'echo $$ >"$1/service.pid"; exec podman system service --time=0 "unix://$2"' \
        sh "$DIR" "$SOCKET" </dev/null >>"$DIR/service.log" 2>&1 &
    for _ in $(seq 100); do
        [[ -S "$SOCKET" ]] && break
        sleep 0.1
    done
    [[ -S "$SOCKET" ]] || { log "the API service did not start"; tail -n 20 "$DIR/service.log" >&2; exit 1; }
fi

{
    echo "export CONTAINERS_CONF=$DIR/containers.conf"
    echo "export J2C_SCHEDULER__CONTAINER__SOCKET=$SOCKET"
    echo "export PLATFORM_IMAGE=$IMAGE"
    echo "export ROOTLESS_USER=$RL_USER"
    echo "export ROOTLESS_HOME=$RL_HOME"
} | tee "$DIR/env"
