"""How long a 10,000-task job array takes to be accepted: one ``POST /api/v1/jobs/``.

    .venv/bin/python -m bench.throughput.accept [--tasks 10000] [--repeats 5]
        [--database-url mysql://root@127.0.0.1:3306/trainyard_accept]

On MariaDB (a database of its own, made afresh): the declared 32-GPU cluster and one VC,
the submit call made in process through the API (authentication, validation, the one
transaction that stores the array and its tasks, the answer with every job id), after one
1-task array that warms the process up. Prints each call's seconds and the median.
Goal (issue: throughput): under 2 s.
"""

from __future__ import annotations

import argparse
import statistics
import time

GOAL_SECONDS = 2.0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--database-url", default="mysql://root@127.0.0.1:3306/trainyard_accept")
    args = parser.parse_args(argv)

    from bench.throughput.cluster import declare_cluster, setup_django

    setup_django(args.database_url, "accept")
    from rest_framework.test import APIClient

    _, _, user = declare_cluster()
    client = APIClient(SERVER_NAME="127.0.0.1")
    client.force_authenticate(user)
    body = {
        "vc": "bench", "name": "sweep", "command": "true", "image": "", "workers": 1,
        "gpu_type": "A100", "gpus_per_worker": 1, "cpus_per_worker": "1",
        "memory_per_worker": 256, "max_wall_time": 3600, "array": {"count": args.tasks},
    }  # fmt: skip

    # A served process has answered before: one small array first, timed apart, takes the
    # imports and the first queries' compilation out of the figures.
    began = time.perf_counter()
    client.post("/api/v1/jobs/", body | {"array": {"count": 1}}, format="json")
    print(f"warm-up: a 1-task array in {time.perf_counter() - began:.3f} s (a new process)")
    seconds = []
    for repeat in range(1, args.repeats + 1):
        began = time.perf_counter()
        answer = client.post("/api/v1/jobs/", body, format="json")
        seconds.append(time.perf_counter() - began)
        if answer.status_code != 201 or len(answer.json()["jobs"]) != args.tasks:
            print(f"the submission was not accepted whole: {answer.status_code} {answer.content!r}")
            return 1
        print(f"call {repeat}: {args.tasks:,} tasks accepted in {seconds[-1]:.3f} s")
    median = statistics.median(seconds)
    verdict = "met" if median < GOAL_SECONDS else "NOT met"
    print(f"median {median:.3f} s, max {max(seconds):.3f} s; goal < {GOAL_SECONDS} s: {verdict}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
