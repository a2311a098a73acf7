"""Synthetic 8x8 digit-like images: one noisy prototype per class, the same for a given seed on
every machine and every rank (generated, nothing downloaded)."""

from __future__ import annotations

import torch


def make_dataset(
    samples: int, *, classes: int = 10, seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    prototypes = (torch.rand(classes, 64, generator=generator) > 0.5).float()
    labels = torch.randint(0, classes, (samples,), generator=generator)
    images = prototypes[labels] + 1.5 * torch.randn(samples, 64, generator=generator)
    split = int(samples * 0.8)
    return images[:split], labels[:split], images[split:], labels[split:]


def batch_indices(size: int, batch: int, step: int, seed: int) -> torch.Tensor:
    """The batch of one step, a function of the step alone: a run resumed at step k sees the
    same batches an uninterrupted one saw from k on."""
    generator = torch.Generator().manual_seed(seed * 1_000_003 + step)
    return torch.randint(0, size, (batch,), generator=generator)
