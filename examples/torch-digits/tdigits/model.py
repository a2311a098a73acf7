"""The model: a small MLP over the 64 pixels."""

from __future__ import annotations

from torch import nn


def make_model(classes: int = 10, hidden: int = 64) -> nn.Module:
    return nn.Sequential(nn.Linear(64, hidden), nn.ReLU(), nn.Linear(hidden, classes))
