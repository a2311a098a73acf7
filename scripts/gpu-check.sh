#!/usr/bin/env bash
# The PyTorch example on a real NVIDIA GPU through j2c: `j2c submit --gpus 1` on the local
# scheduler (the GPU reaches the job as CUDA_VISIBLE_DEVICES) beside the same script run by hand,
# and what it measured: the device, steps/s, and j2c's overhead (send to exit, minus the run by
# hand). For a machine lent with a GPU; anywhere else it says so and exits 77.
#
#   scripts/gpu-check.sh [STEPS]     PYTHON=... picks the Python that has CUDA PyTorch
#
# Exit codes: 0 measured, 77 no NVIDIA GPU or no CUDA PyTorch here, 1 the job failed.
set -euo pipefail
cd "$(dirname "$0")/.."
STEPS=${1:-2000}
if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L >/dev/null 2>&1; then
    echo "gpu-check: no NVIDIA GPU here (nvidia-smi finds none)"
    exit 77
fi
nvidia-smi -L
PYTHON=${PYTHON:-python3}
if ! "$PYTHON" -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
    echo "gpu-check: $PYTHON has no CUDA PyTorch (set PYTHON to one that has)"
    exit 77
fi
J2C=${J2C:-$(command -v j2c || echo .venv/bin/j2c)}
work=$(mktemp -d -t j2c-gpu-XXXXXX)
trap 'rm -rf "$work"' EXIT
cp -r examples/torch-digits "$work/project"
"$PYTHON" -m venv --system-site-packages --without-pip "$work/project/.venv"
export J2C_DATA_DIR="$work/data"
args=(--steps "$STEPS" --device cuda --checkpoint-every 0 --log-every 500)

now() { date +%s.%N; }
t0=$(now)
(cd "$work/project" && .venv/bin/python train.py "${args[@]}") | tee "$work/by-hand.log"
t1=$(now)
rm -rf "$work/project/outputs"
(cd "$work/project" && "$J2C" submit train.py --venv-path .venv --gpus 1 -- "${args[@]}") |
    tee "$work/j2c.log"
t2=$(now)
grep -q "^final step" "$work/j2c.log" || { echo "gpu-check: the job did not finish"; exit 1; }

calc() { "$PYTHON" -c "print(round($1, 2))"; }
hand=$(calc "$t1 - $t0")
sent=$(calc "$t2 - $t1")
echo
echo "gpu-check: $(grep -o 'training on .*' "$work/j2c.log" | head -1)"
echo "gpu-check: by hand: $(grep -o '([0-9]* steps/s)' "$work/by-hand.log") in ${hand} s"
echo "gpu-check: through j2c: $(grep -o '([0-9]* steps/s)' "$work/j2c.log") in ${sent} s" \
    "(overhead $(calc "$sent - $hand") s: pack, upload, submit, unpack, log stream)"
