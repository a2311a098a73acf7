"""Train a small MLP on synthetic digits with PyTorch, on one process or many (torchrun, DDP).

- Distributed when ``WORLD_SIZE`` > 1 (torchrun, or j2c's ``--nodes N``): gloo on CPU, NCCL on
  CUDA; every rank trains on its share of each batch and DDP averages the gradients.
- Deterministic for a seed: the data, the initial weights and each step's batch.
- A checkpoint every ``--checkpoint-every`` steps (rank 0), atomically; a run resumes from the
  latest one in ``--checkpoint-dir`` when there is one (j2c restores it after a preemption).
- Metrics per step to MLflow when ``MLFLOW_TRACKING_URI`` is set and mlflow is installed,
  else to ``$J2C_OUTPUT_DIR/metrics.json``.
- Ends with one line a test can compare across ranks and runs:
  ``final step N loss L accuracy A weights sha256:...``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from tdigits import checkpoints
from tdigits.data import batch_indices, make_dataset
from tdigits.model import make_model
from torch.nn.parallel import DistributedDataParallel


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--batch", type=int, default=64, help="Per step, over all ranks.")
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--samples", type=int, default=4096)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="auto", help="auto (CUDA when present), cpu, cuda")
    parser.add_argument("--checkpoint-dir", default="checkpoints")
    parser.add_argument("--checkpoint-every", type=int, default=50)
    parser.add_argument("--sleep", type=float, default=0.0, help="Pause per step (demos, tests).")
    parser.add_argument("--log-every", type=int, default=50)
    return parser.parse_args()


def device_of(choice: str, local_rank: int) -> torch.device:
    if choice == "auto":
        choice = "cuda" if torch.cuda.is_available() else "cpu"
    if choice == "cuda":
        return torch.device("cuda", local_rank % max(1, torch.cuda.device_count()))
    return torch.device("cpu")


def digest(model: torch.nn.Module) -> str:
    hashed = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        hashed.update(name.encode())
        hashed.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return hashed.hexdigest()[:16]


class Metrics:
    """Per-step metrics to MLflow when configured, else to metrics.json (rank 0 only)."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.history: list[dict[str, float]] = []
        self.mlflow = None
        if enabled and os.environ.get("MLFLOW_TRACKING_URI"):
            try:
                import mlflow

                mlflow.start_run(run_id=os.environ.get("MLFLOW_RUN_ID"))
                self.mlflow = mlflow
            except Exception as exc:  # tracking never stops training
                print(f"mlflow not used: {exc}", flush=True)

    def log(self, step: int, values: dict[str, float]) -> None:
        if not self.enabled:
            return
        self.history.append({"step": step, **values})
        if self.mlflow is not None:
            self.mlflow.log_metrics(values, step=step)

    def close(self) -> None:
        if not self.enabled:
            return
        out = Path(os.environ.get("J2C_OUTPUT_DIR", "outputs"))
        out.mkdir(parents=True, exist_ok=True)
        (out / "metrics.json").write_text(json.dumps({"history": self.history}, indent=1))
        if self.mlflow is not None:
            self.mlflow.end_run()


def main() -> None:
    args = parse()
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    device = device_of(args.device, local_rank)
    if world > 1:
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    torch.manual_seed(args.seed)
    x_train, y_train, x_test, y_test = make_dataset(args.samples, seed=args.seed)
    x_train, y_train = x_train.to(device), y_train.to(device)
    model = make_model().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)

    start = 0
    folder = Path(args.checkpoint_dir)
    found = checkpoints.latest(folder) if rank == 0 else None
    state = [checkpoints.load(found) if found is not None else None]
    if world > 1:
        dist.broadcast_object_list(state, src=0)  # rank 0's working copy holds them
    if state[0] is not None:
        model.load_state_dict(state[0]["model"])
        optimizer.load_state_dict(state[0]["optimizer"])
        start = int(state[0]["step"])
        if rank == 0:
            print(f"resumed from step {start} ({found})", flush=True)
    trained = DistributedDataParallel(model) if world > 1 else model
    metrics = Metrics(enabled=rank == 0)
    if rank == 0:
        where = f"{world} ranks" if world > 1 else "1 process"
        name = f" {torch.cuda.get_device_name(device)}" if device.type == "cuda" else ""
        print(f"training on {device}{name} ({where}), steps {start + 1}..{args.steps}", flush=True)

    began = time.perf_counter()
    loss = torch.tensor(0.0)
    for step in range(start + 1, args.steps + 1):
        batch = batch_indices(len(x_train), args.batch, step, args.seed)
        mine = batch[rank::world].to(device)  # this rank's share of the step's batch
        optimizer.zero_grad()
        loss = F.cross_entropy(trained(x_train[mine]), y_train[mine])
        loss.backward()
        optimizer.step()
        if step == start + 1 and rank == 0:
            print(f"first step {step} done in {time.perf_counter() - began:.3f} s", flush=True)
        if step % args.log_every == 0 or step == args.steps:
            print(f"step {step}/{args.steps} loss={loss.item():.4f}", flush=True)
            metrics.log(step, {"loss": float(loss.item())})
        if rank == 0 and args.checkpoint_every and step % args.checkpoint_every == 0:
            checkpoints.save(
                folder, step, {"model": model.state_dict(), "optimizer": optimizer.state_dict()}
            )
        if args.sleep:
            time.sleep(args.sleep)

    with torch.no_grad():
        predicted = model(x_test.to(device)).argmax(dim=1).cpu()
        accuracy = float((predicted == y_test).float().mean())
        full = F.cross_entropy(model(x_train), y_train).item()
    metrics.log(args.steps, {"accuracy": accuracy, "train_loss": full})
    metrics.close()
    steps_s = (args.steps - start) / max(time.perf_counter() - began, 1e-9)
    print(
        f"final step {args.steps} loss {full:.6f} accuracy {accuracy:.3f} "
        f"weights sha256:{digest(model)} ({steps_s:.0f} steps/s)",
        flush=True,
    )
    if world > 1:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
