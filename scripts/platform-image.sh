#!/usr/bin/env bash
# Build the j2c platform image (Debian bookworm minbase + python3, python3-venv, python3-numpy,
# python3-torch + j2c) with podman: the platform's base image as j2c meets it, PyTorch included
# (Debian's CPU build with gloo; a GPU platform's CUDA build differs in nothing j2c touches), and start podman's Docker Engine API service on a socket in
# DIR. Prints `export` lines for the tests and the container scheduler (also kept in DIR/env);
# stop the service with `scripts/platform-image.sh DIR --stop`.
#
#   scripts/platform-image.sh DIR           install podman/runc/debootstrap if missing, build
#                                           (or reuse) the image, start the API service
#   scripts/platform-image.sh DIR --stop    stop the API service this script started in DIR
#
# The image is tagged by the hash of this script and the j2c sources: an unchanged recipe reuses
# the image podman already has. j2c goes in as its compute side (the packages and libraries
# j2c-unpack needs, declared in pyproject.toml), in /opt/j2c/lib (off the image's own sys.path, so a job's
# --system-site-packages venv never sees them); /usr/local/bin/j2c-unpack starts it with the
# image's python3. No registry is pulled from: the rootfs comes from the Debian mirror apt uses.
#
# Exit codes: 0 up, 2 podman missing and not installable here (not root, no apt), 1 anything else.
set -euo pipefail

usage() { echo "usage: $0 DIR [--stop]" >&2; exit 1; }
[[ $# -ge 1 && $# -le 2 ]] || usage
mkdir -p "$1"
DIR=$(cd "$1" && pwd)
ROOT_DIR=$(cd "$(dirname "$0")/.." && pwd)
log() { echo "platform-image: $*" >&2; }

if [[ "${2:-}" == "--stop" ]]; then
    if [[ -s "$DIR/service.pid" ]]; then
        kill "$(cat "$DIR/service.pid")" 2>/dev/null || true
        rm -f "$DIR/service.pid"
    fi
    exit 0
fi
[[ -z "${2:-}" ]] || usage

# ---------------------------------------------------------------- install (only when missing)
PACKAGES=(podman runc debootstrap)
if ! command -v podman >/dev/null || ! command -v runc >/dev/null ||
    ! command -v debootstrap >/dev/null; then
    if [[ $(id -u) -ne 0 ]] || ! command -v apt-get >/dev/null; then
        log "podman is not installed and cannot be installed here (needs root and apt-get)"
        exit 2
    fi
    log "installing ${PACKAGES[*]}"
    export DEBIAN_FRONTEND=noninteractive
    if ! apt-get install -y "${PACKAGES[@]}" >&2; then
        apt-get update >&2 && apt-get install -y "${PACKAGES[@]}" >&2 || {
            log "apt-get install failed"; exit 2; }
    fi
fi

# crun fails in these sandboxes (cgroups in hybrid mode); runc works. Every start fails on
# setrlimit unless the default ulimits are dropped.
CONF="$DIR/containers.conf"
cat >"$CONF" <<'EOF'
[containers]
default_ulimits = []
[engine]
runtime = "runc"
EOF
export CONTAINERS_CONF="$CONF"

# ---------------------------------------------------------------- the image
IMAGE_NAME=${J2C_PLATFORM_IMAGE_NAME:-localhost/j2c-platform}
PYTHON=${PYTHON:-$(command -v python3)}
# The compute side, declared once in pyproject.toml: the distributions j2c-unpack needs (the
# `unpack` extra) and the parts of j2c_server it imports ([tool.j2c] compute-packages).
pyproject() {
    "$PYTHON" -c 'import sys, tomllib
data = tomllib.load(open(sys.argv[1], "rb"))
print("\n".join(eval(sys.argv[2], {"d": data})))' "$ROOT_DIR/pyproject.toml" "$1"
}
mapfile -t UNPACK_DEPS < <(pyproject 'd["project"]["optional-dependencies"]["unpack"]')
mapfile -t COMPUTE_PACKAGES < <(pyproject 'd["tool"]["j2c"]["compute-packages"]')
[[ ${#UNPACK_DEPS[@]} -gt 0 && ${#COMPUTE_PACKAGES[@]} -gt 0 ]] || {
    log "cannot read the unpack extra or [tool.j2c] compute-packages from pyproject.toml"; exit 1; }
# Two tags: the base (Debian + j2c-unpack's libraries) by this script and the host's pip
# freeze, rebuilt rarely (minutes); the image = base + j2c's sources, by their hash, made in
# seconds whenever a source changes.
base_hash=$(
    { sha256sum "$0"; "$PYTHON" -m pip freeze 2>/dev/null | grep -ivE '^(j2c|-e )'; } |
        sha256sum | cut -c1-16
)
BASE="$IMAGE_NAME-base:$base_hash"
recipe_hash=$(
    {
        echo "$BASE"
        cd "$ROOT_DIR" && find j2c_server/*.py "${COMPUTE_PACKAGES[@]/#/j2c_server/}" \
            -name '*.py' | LC_ALL=C sort | xargs sha256sum
    } | sha256sum | cut -c1-16
)
IMAGE="$IMAGE_NAME:$recipe_hash"

mirror() { # the Debian mirror apt already uses (never hard-coded here)
    local files=() f
    for f in /etc/apt/sources.list /etc/apt/sources.list.d/*; do [[ -f "$f" ]] && files+=("$f"); done
    awk '/^URIs:/ && !/security/ { print $2; exit }
         /^deb / && !/security/ { for (i = 2; i <= NF; i++) if ($i ~ /^[a-z]+:\/\//) { print $i; exit } }' \
        "${files[@]}"
}

build_base() {
    local work rootfs uri
    work=$(mktemp -d "${TMPDIR:-/var/tmp}/j2c-platform-XXXXXX")
    rootfs="$work/rootfs"
    uri=$(mirror)
    [[ -n "$uri" ]] || { log "cannot find the Debian mirror in apt's sources"; exit 1; }
    log "debootstrap bookworm (minbase + python3, python3-venv, python3-numpy, python3-torch)"
    debootstrap --variant=minbase --include=python3,python3-venv,python3-numpy,python3-torch \
        bookworm "$rootfs" "$uri" >"$work/debootstrap.log" 2>&1 || {
        tail -n 20 "$work/debootstrap.log" >&2; exit 1; }
    local image_py host_py
    image_py=$(chroot "$rootfs" python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')
    host_py=$("$PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
    [[ "$image_py" == "$host_py" ]] || {
        log "the image's Python is $image_py but $PYTHON is $host_py: j2c's libraries are" \
            "installed with the host's pip, so they must match"; exit 1; }
    log "installing j2c-unpack's libraries (${UNPACK_DEPS[*]}) into /opt/j2c/lib"
    local lib="$rootfs/opt/j2c/lib"
    mkdir -p "$lib"
    # Versions pinned to the ones this checkout is tested with.
    "$PYTHON" -m pip freeze 2>/dev/null | grep -ivE '^(j2c|-e )' >"$work/constraints.txt" || true
    # pip names index locations some machines lack once per package: noise, not failure.
    local out noise="is ignored: it is neither a file nor a directory"
    if ! out=$("$PYTHON" -m pip install --quiet --no-compile --target "$lib" \
        -c "$work/constraints.txt" "${UNPACK_DEPS[@]}" 2>&1); then
        grep -v "$noise" <<<"$out" >&2
        log "pip install into the image failed"
        exit 1
    fi
    grep -v "$noise" <<<"$out" >&2 || true
    cat >"$rootfs/usr/local/bin/j2c-unpack" <<'EOF'
#!/usr/bin/python3 -I
import sys
sys.path.insert(0, "/opt/j2c/lib")
from j2c_server.unpack.__main__ import main
sys.exit(main())
EOF
    chmod 755 "$rootfs/usr/local/bin/j2c-unpack"
    rm -rf "$rootfs/var/cache/apt/archives/"*.deb "$rootfs/var/lib/apt/lists/"*
    log "podman import $BASE"
    tar -C "$rootfs" -c . | podman import --quiet - "$BASE" >/dev/null
    rm -rf "$work"
}

add_sources() { # the base + j2c's compute side in /opt/j2c/lib, committed as $IMAGE
    local work ctr
    work=$(mktemp -d "${TMPDIR:-/var/tmp}/j2c-platform-XXXXXX")
    (cd "$ROOT_DIR" && tar -c --exclude='__pycache__' j2c_server/*.py \
        "${COMPUTE_PACKAGES[@]/#/j2c_server/}") | tar -C "$work" -x
    ctr=$(podman create --quiet "$BASE" /bin/true)
    podman cp "$work/j2c_server" "$ctr:/opt/j2c/lib/" >&2
    podman commit --quiet "$ctr" "$IMAGE" >/dev/null
    podman rm --force "$ctr" >/dev/null
    rm -rf "$work"
}

if podman image exists "$IMAGE"; then
    log "reusing $IMAGE"
else
    podman image exists "$BASE" || build_base
    log "adding j2c's sources: $IMAGE"
    add_sources
fi

# ---------------------------------------------------------------- the API service
SOCKET="$DIR/podman.sock"
if [[ -s "$DIR/service.pid" ]] && kill -0 "$(cat "$DIR/service.pid")" 2>/dev/null; then
    log "API service already running"
else
    rm -f "$SOCKET"
    setsid podman --runtime runc system service --time=0 "unix://$SOCKET" \
        </dev/null >>"$DIR/service.log" 2>&1 &
    echo $! >"$DIR/service.pid"
    for _ in $(seq 100); do
        [[ -S "$SOCKET" ]] && break
        sleep 0.1
    done
    [[ -S "$SOCKET" ]] || { log "the API service did not start"; tail -n 20 "$DIR/service.log" >&2; exit 1; }
fi

{
    echo "export CONTAINERS_CONF=$CONF"
    echo "export J2C_SCHEDULER__CONTAINER__SOCKET=$SOCKET"
    echo "export PLATFORM_IMAGE=$IMAGE"
} | tee "$DIR/env"
