"""Synthetic 8x8 digit-like images: one noisy prototype per class, reproducible by seed."""

from __future__ import annotations

import numpy as np


def make_dataset(
    samples: int, *, classes: int = 10, seed: int = 0
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    prototypes = rng.random((classes, 64)) > 0.5
    labels = rng.integers(0, classes, size=samples)
    images = prototypes[labels].astype(float) + rng.normal(0, 2.5, size=(samples, 64))
    images = np.hstack([images, np.ones((samples, 1))])  # bias column
    split = int(samples * 0.8)
    return images[:split], labels[:split], images[split:], labels[split:]
