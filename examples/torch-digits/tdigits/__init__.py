"""A small PyTorch training project: synthetic digits, an MLP, DDP-ready."""
