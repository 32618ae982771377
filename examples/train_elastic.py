"""An elastic training job for Trainyard: it survives being grown and shrunk.

Run by an elastic job (``min_workers`` < ``max_workers``), each worker's command runs
under torchrun's elastic agent, which sets ``RANK`` and ``WORLD_SIZE`` anew at every
resize and restarts this script. So the script:

- saves a checkpoint (model, optimizer, step) after every step, from rank 0, atomically,
  into ``--checkpoint-dir`` (the job's working directory by default: every worker sees it),
  and logs the step before a stop can end it (a step saved is a step logged);
- on start, resumes from it at the new world size (the step goes on, never from 0);
- keeps its **global batch**: the ``--global-batch`` samples of a step are split among the
  workers (each takes every WORLD_SIZE-th), and the averaged gradient is the whole batch's,
  whatever the size; the learning rate stays the same.

It fits a linear model to a fixed data set by full-batch gradient descent, so its loss
goes down at every step, at any size. Each step logs ``step N world W loss L``.

    torchrun --nnodes=1:4 --nproc-per-node=1 --rdzv-backend=c10d \\
        --rdzv-endpoint=localhost:29400 examples/train_elastic.py --steps 500
"""

from __future__ import annotations

import argparse
import os
import signal
import time
from pathlib import Path

import torch
import torch.distributed as dist

STOPS = {signal.SIGTERM, signal.SIGINT}

FEATURES = 8


def data(samples: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The same data set in every process: inputs and exact targets of a hidden model."""
    generator = torch.Generator().manual_seed(0)
    inputs = torch.randn(samples, FEATURES, generator=generator)
    truth = torch.randn(FEATURES, 1, generator=generator)
    return inputs, inputs @ truth


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--global-batch", type=int, default=240)
    parser.add_argument("--lr", type=float, default=0.005)
    parser.add_argument("--step-seconds", type=float, default=0.05)
    parser.add_argument("--checkpoint-dir", default=os.getcwd())
    args = parser.parse_args()

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    checkpoint = Path(args.checkpoint_dir) / "elastic-checkpoint.pt"
    weights = torch.zeros(FEATURES, 1, requires_grad=True)
    optimizer = torch.optim.SGD([weights], lr=args.lr)
    step = 0
    if checkpoint.exists():
        saved = torch.load(checkpoint)
        weights.data.copy_(saved["weights"])
        optimizer.load_state_dict(saved["optimizer"])
        step = saved["step"]
        print(f"resumed at step {step} with world {world}", flush=True)
    inputs, targets = data(args.global_batch)
    mine = slice(rank, None, world)  # this worker's share of the global batch
    while step < args.steps:
        optimizer.zero_grad()
        errors = inputs[mine] @ weights - targets[mine]
        # Summed over the workers and divided by the global batch: the whole batch's mean.
        loss = (errors**2).sum() / args.global_batch
        loss.backward()
        total = torch.stack([loss.detach(), torch.tensor(0.0)])
        dist.all_reduce(weights.grad)
        dist.all_reduce(total)
        optimizer.step()
        step += 1
        if rank == 0:
            # A stop (the agent's SIGTERM at a resize) waits until the step is both saved
            # and logged: a step in the checkpoint is a step in the log.
            signal.pthread_sigmask(signal.SIG_BLOCK, STOPS)
            partial = checkpoint.with_suffix(".partial")
            state = {"weights": weights.detach(), "optimizer": optimizer.state_dict()}
            torch.save(state | {"step": step}, partial)
            partial.replace(checkpoint)
            print(f"step {step} world {world} loss {total[0].item():.6f}", flush=True)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, STOPS)
        time.sleep(args.step_seconds)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
