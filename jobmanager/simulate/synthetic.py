"""A seeded synthetic trace: Poisson arrivals, log-normal run times, mostly 1-GPU jobs."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from jobmanager.simulate.trace import Trace, TraceJob

# GPUs per job and their share of jobs, close to the mix of the ITP and Philly traces:
# about seven jobs in ten use one GPU, and a few percent span several 8-GPU nodes.
GPU_MIX: tuple[tuple[int, float], ...] = (
    (1, 0.70),
    (2, 0.08),
    (4, 0.10),
    (8, 0.08),
    (16, 0.03),
    (32, 0.01),
)


@dataclass(frozen=True)
class SyntheticSpec:
    """The generator's knobs. With the defaults a job asks for 2.7 GPUs for 1.5 hours on
    average, one arriving every 10 seconds: about 1,550 GPUs busy, 77 % of 250 eight-GPU
    nodes."""

    jobs: int = 10_000
    vcs: int = 4
    seed: int = 1
    mean_interarrival: float = 10.0  # seconds between submissions, exponentially spread
    median_duration: float = 1800.0  # seconds
    duration_sigma: float = 1.5  # of the log of the duration
    max_duration: float = 7 * 24 * 3600.0  # wall-time limit: longer draws are cut here
    gpu_mix: tuple[tuple[int, float], ...] = GPU_MIX


def generate(spec: SyntheticSpec) -> Trace:
    """The same spec (seed included) always gives the same trace.

    VCs are named ``vc00``, ``vc01``, ... and get unequal shares of the jobs (VC i in
    proportion to 1 / (i + 1)), so that some VCs lend and others borrow.
    """
    if spec.jobs < 0 or spec.vcs < 1:
        raise ValueError("a synthetic trace needs jobs >= 0 and vcs >= 1")
    rng = random.Random(spec.seed)
    vc_names = [f"vc{index:02d}" for index in range(spec.vcs)]
    vc_weights = [1 / (index + 1) for index in range(spec.vcs)]
    gpu_counts = [gpus for gpus, _ in spec.gpu_mix]
    gpu_weights = [share for _, share in spec.gpu_mix]
    width = len(str(max(spec.jobs - 1, 0)))
    mu = math.log(spec.median_duration)
    jobs: list[TraceJob] = []
    now = 0.0
    for index in range(spec.jobs):
        if index:
            now += rng.expovariate(1 / spec.mean_interarrival)
        duration = min(rng.lognormvariate(mu, spec.duration_sigma), spec.max_duration)
        jobs.append(
            TraceJob(
                id=f"job{index:0{width}d}",
                vc=rng.choices(vc_names, vc_weights)[0],
                submitted=round(now, 3),
                duration=max(1.0, round(duration)),
                gpus=rng.choices(gpu_counts, gpu_weights)[0],
            )
        )
    name = f"synthetic-{spec.jobs}jobs-{spec.vcs}vcs-seed{spec.seed}"
    return Trace.of(name, jobs)
