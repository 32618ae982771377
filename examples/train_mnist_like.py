"""A small real training job for Trainyard: a classifier on synthetic data, on the CPU.

It writes a checkpoint to ``$TRAINYARD_OUTPUT_PATH`` (or ``--output``) every few steps and,
when started again (after a preemption or a retry), resumes from the latest one, so that
little work is lost. Run under ``torchrun`` (or Trainyard's distributed jobs, which set
``WORLD_SIZE``, ``RANK``, ``MASTER_ADDR`` and ``MASTER_PORT``) it trains data-parallel over
gloo.

    python examples/train_mnist_like.py --steps 200 --output /tmp/run1
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn

stop_requested = False


def request_stop(signum: int, frame: object) -> None:
    """SIGTERM (preemption, kill, wall time): save and leave before the grace period ends."""
    global stop_requested
    stop_requested = True


def synthetic_batch(step: int, rank: int, batch_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(step * 1000 + rank)
    inputs = torch.randn(batch_size, 64, generator=generator)
    labels = (inputs[:, :10].sum(dim=1) > 0).long() + 2 * (inputs[:, 10:20].sum(dim=1) > 0).long()
    return inputs, labels


def latest_checkpoint(output: Path) -> Path | None:
    checkpoints = sorted(output.glob("checkpoint-*.pt"), key=lambda p: int(p.stem.split("-")[1]))
    return checkpoints[-1] if checkpoints else None


def save_checkpoint(
    output: Path, step: int, model: nn.Module, optimizer: torch.optim.Optimizer
) -> None:
    """Write to a temporary file, then rename: a checkpoint is whole or absent."""
    output.mkdir(parents=True, exist_ok=True)
    partial = output / f".checkpoint-{step}.pt.tmp"
    torch.save(
        {"step": step, "model": model.state_dict(), "optimizer": optimizer.state_dict()}, partial
    )
    partial.rename(output / f"checkpoint-{step}.pt")
    for old in sorted(output.glob("checkpoint-*.pt"), key=lambda p: int(p.stem.split("-")[1]))[:-2]:
        old.unlink()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--checkpoint-every", type=int, default=20)
    parser.add_argument(
        "--step-seconds", type=float, default=0.0, help="sleep per step, to make a demo job last"
    )
    parser.add_argument(
        "--output", default=os.environ.get("TRAINYARD_OUTPUT_PATH", "var/example-output")
    )
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, request_stop)

    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    if world_size > 1:
        dist.init_process_group("gloo", rank=rank, world_size=world_size)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 4))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    output = Path(args.output)

    start = 0
    checkpoint = latest_checkpoint(output)
    if checkpoint is not None:
        state = torch.load(checkpoint, weights_only=True)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        start = state["step"]
        print(f"rank {rank}: resumed from {checkpoint.name} at step {start}", flush=True)

    loss_fn = nn.CrossEntropyLoss()
    step, loss = start, None  # a run restarted after its last step has none left to do
    for step in range(start + 1, args.steps + 1):
        inputs, labels = synthetic_batch(step, rank, args.batch_size)
        optimizer.zero_grad()
        loss = loss_fn(model(inputs), labels)
        loss.backward()
        if world_size > 1:
            for parameter in model.parameters():
                dist.all_reduce(parameter.grad)
                parameter.grad /= world_size
        optimizer.step()
        if args.step_seconds:
            time.sleep(args.step_seconds)
        if step % 10 == 0:
            print(f"rank {rank}: step {step}/{args.steps} loss {loss.item():.4f}", flush=True)
        if rank == 0 and (step % args.checkpoint_every == 0 or stop_requested):
            save_checkpoint(output, step, model, optimizer)
        if stop_requested:
            print(f"rank {rank}: stopping at step {step} on SIGTERM (checkpoint saved)", flush=True)
            return 143
    if rank == 0:
        save_checkpoint(output, step, model, optimizer)
        final = "no step left" if loss is None else f"final loss {loss.item():.4f}"
        print(f"rank 0: done, {final}", flush=True)
    if world_size > 1:
        # Every rank leaves the group together: a rank that tore its group down while a
        # peer still saved its checkpoint was seen to abort at exit (SIGABRT in gloo).
        dist.barrier()
        dist.destroy_process_group()
    return 0


def leave(code: int) -> None:
    """Exit with ``code``. A distributed run, its work saved and its group left, exits at
    once: gloo's threads were still seen to abort a finished rank (``terminate called
    without an active exception``, SIGABRT) during the interpreter's own teardown."""
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)


if __name__ == "__main__":
    leave(main())
