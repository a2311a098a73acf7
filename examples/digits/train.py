"""Train a tiny softmax classifier on synthetic 8x8 "digits" with numpy alone.

Prints one line per epoch (loss, accuracy) and writes metrics.json into $J2C_OUTPUT_DIR
(or ./outputs when run by hand). Small enough to finish in seconds on a CPU, shaped like a
real training script: arguments, a seed, a loop, a metrics file.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np

from digits.data import make_dataset


def softmax(logits: np.ndarray) -> np.ndarray:
    shifted = logits - logits.max(axis=1, keepdims=True)
    exp = np.exp(shifted)
    return exp / exp.sum(axis=1, keepdims=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--lr", type=float, default=0.5)
    parser.add_argument("--samples", type=int, default=2000)
    parser.add_argument("--sleep", type=float, default=0.0, help="Pause per epoch (demo).")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    x_train, y_train, x_test, y_test = make_dataset(args.samples, seed=args.seed)
    classes = int(y_train.max()) + 1
    weights = np.zeros((x_train.shape[1], classes))
    onehot = np.eye(classes)[y_train]
    print(f"training on {len(x_train)} samples, {classes} classes, {args.epochs} epochs")

    history = []
    for epoch in range(1, args.epochs + 1):
        started = time.perf_counter()
        probs = softmax(x_train @ weights)
        loss = float(-np.mean(np.sum(onehot * np.log(probs + 1e-12), axis=1)))
        weights -= args.lr * x_train.T @ (probs - onehot) / len(x_train)
        accuracy = float(np.mean(np.argmax(x_test @ weights, axis=1) == y_test))
        history.append({"epoch": epoch, "loss": loss, "accuracy": accuracy})
        print(
            f"epoch {epoch}/{args.epochs} loss={loss:.4f} accuracy={accuracy:.3f} "
            f"({time.perf_counter() - started:.3f}s)"
        )
        if args.sleep:
            time.sleep(args.sleep)

    out = Path(os.environ.get("J2C_OUTPUT_DIR", "outputs"))
    out.mkdir(parents=True, exist_ok=True)
    (out / "metrics.json").write_text(json.dumps({"history": history}, indent=2))
    print(
        f"final accuracy {history[-1]['accuracy']:.3f}; metrics written to {out / 'metrics.json'}"
    )


if __name__ == "__main__":
    main()
