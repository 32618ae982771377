"""What one submission costs the web tier: ``POST /api/v1/jobs/`` in-process, with the
check that the owner may run the command's program done every time and remembered.

    .venv/bin/python -m bench.throughput.submit_cost [--submissions 200] [--rounds 3]

As root (jobs run as their owners' accounts, so the check runs as the owner in a child).
The bench's cluster on a fresh MariaDB database of its own (``--database-url``); one user
submits the same ``true`` job, as a sweep or a burst does, through Django's test client and
every middleware. Per submission: the CPU time of this
process and of the children it waited for (the check's ``setpriv`` and ``sh``), and the wall
time, each setting alternated ``--rounds`` times.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import time


def cpu_seconds() -> float:
    """This process's CPU time and its reaped children's."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--submissions", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--database-url", default="mysql://root@127.0.0.1:3306/trainyard_submit_cost"
    )
    args = parser.parse_args(argv)

    from bench.throughput.cluster import declare_cluster, setup_django

    setup_django(args.database_url, "submit-cost")
    from django.test import Client

    from backend.accounts.actions import create_api_token
    from backend.jobs import commands

    token = create_api_token(declare_cluster()[2], "bench")[1]
    client = Client(HTTP_AUTHORIZATION=f"Token {token}", HTTP_HOST="127.0.0.1")
    body = {"vc": "bench", "gpu_type": "A100", "command": "true", "gpus_per_worker": 1}

    def submit() -> None:
        answer = client.post("/api/v1/jobs/", body, content_type="application/json")
        if answer.status_code != 201:
            raise SystemExit(f"submit answered {answer.status_code}: {answer.content[:300]!r}")

    for _ in range(20):  # warm: connections, caches, the first queries' plans
        submit()
    remembered = commands.RUNNABLE_REMEMBERED_SECONDS
    figures: dict[str, list[tuple[float, float]]] = {"checked each time": [], "remembered": []}
    for _ in range(args.rounds):
        for label, seconds in (("checked each time", 0.0), ("remembered", remembered)):
            commands.RUNNABLE_REMEMBERED_SECONDS = seconds
            commands.forget_runnable_programs()
            cpu, began = cpu_seconds(), time.monotonic()
            for _ in range(args.submissions):
                submit()
            count = args.submissions
            per_cpu = (cpu_seconds() - cpu) / count * 1000
            per_wall = (time.monotonic() - began) / count * 1000
            figures[label].append((per_cpu, per_wall))
            print(f"{label}: {per_cpu:.2f} ms CPU, {per_wall:.2f} ms wall a submission")
    print(f"\n{args.submissions} submissions x {args.rounds} rounds, medians:")
    print("| the owner's program | CPU a submission, ms | wall a submission, ms |")
    print("|---|---|---|")
    for label, rows in figures.items():
        cpu_ms = statistics.median(row[0] for row in rows)
        wall_ms = statistics.median(row[1] for row in rows)
        print(f"| {label} | {cpu_ms:.2f} | {wall_ms:.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
