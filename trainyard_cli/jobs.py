"""The CLI's job commands that run a while: ``submit`` (and ``--wait``), ``logs`` (and
``-f``), and the SSH command line a job's endpoint becomes."""

from __future__ import annotations

import json
import shlex
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import click
from rich.console import Console

from trainyard_cli.client import BAD_INPUT, FAILED, Api, CliError, Config, describe_errors
from trainyard_cli.manifest import duration_seconds, read_manifest, throughput_values

err = Console(stderr=True)
TERMINAL = ("finished", "failed", "killed", "timeout")
# A job's end as the exit code of ``submit --wait``: a failed job's own code.
WAIT_EXIT_CODES = {"finished": 0, "timeout": 124, "killed": 130, "paused": FAILED}
LOG_CHUNK = 1024 * 1024


def _pairs(values: tuple[str, ...], option: str) -> dict[str, str]:
    pairs = {}
    for value in values:
        key, sep, rest = value.partition("=")
        if not sep or not key:
            raise CliError(f"{option} {value!r}: write KEY=VALUE", BAD_INPUT)
        pairs[key] = rest
    return pairs


def build_submission(manifest: Path | None, command: tuple[str, ...], **flags: Any) -> dict:
    """The manifest's fields (if any), then the flags given over them."""
    body = read_manifest(manifest) if manifest else {}
    env = _pairs(flags.pop("env"), "--env")
    selector = _pairs(flags.pop("node_selector"), "--node-selector")
    ports = _pairs(flags.pop("ports", ()), "--port")
    if ports:
        exposed = [port for port in body.get("ports") or [] if port.get("name") not in ports]
        for name, number in ports.items():
            if not number.isdigit():
                raise CliError(
                    f"--port {name}={number}: write NAME=PORT, e.g. jupyter=8888", BAD_INPUT
                )
            exposed.append({"name": name, "port": int(number)})
        body["ports"] = exposed
    if env:
        body["env"] = {**(body.get("env") or {}), **env}
    if selector:
        body["node_selector"] = {**(body.get("node_selector") or {}), **selector}
    if flags.get("max_wall_time") is not None:
        flags["max_wall_time"] = duration_seconds(flags["max_wall_time"], "--wall-time")
    if flags.get("throughput") is not None:
        flags["throughput"] = throughput_values(flags["throughput"])
    body.update({name: value for name, value in flags.items() if value is not None})
    if command:
        body["command"] = command[0] if len(command) == 1 else shlex.join(command)
    if not body.get("command"):
        raise CliError("Give the command to run: after --, or command: in the manifest", BAD_INPUT)
    if not body.get("vc"):
        raise CliError("Give the VC: --vc, or vc: in the manifest", BAD_INPUT)
    return body


@click.command()
@click.option(
    "-f", "--file", "manifest", type=click.Path(path_type=Path), help="A YAML manifest (- stdin)."
)
@click.option("--vc", help="The virtual cluster to run in.")
@click.option("--name", help="The job's name (default: from the command).")
@click.option("--type", "type", type=click.Choice(["batch", "interactive", "distributed"]))
@click.option("--gpu-type", help="A100, V100, cpu...")
@click.option("--workers", type=int, help="Workers (all start together, or none).")
@click.option("--min-workers", type=int, help="Elastic: the fewest workers it runs with.")
@click.option("--max-workers", type=int, help="Elastic: the most it grows to on idle GPUs.")
@click.option("--deadline", help="When it must have finished (ISO 8601, e.g. 2026-12-04T09:00Z).")
@click.option(
    "--throughput",
    help="Samples/s at 1, 2, ... workers (100,190,270): with --deadline and --work, the "
    "answer says whether it can meet its deadline.",
)
@click.option("--work", type=float, help="The samples (or steps) the job needs.")
@click.option("--gpus", "gpus_per_worker", type=int, help="GPUs per worker.")
@click.option("--cpus", "cpus_per_worker", type=float, help="CPUs per worker (default: t-shirt).")
@click.option("--memory", "memory_per_worker", help="Memory per worker: MiB, or e.g. 64Gi.")
@click.option("--image", help="The container image (Kubernetes).")
@click.option("--env", multiple=True, help="KEY=VALUE (repeat).")
@click.option("--working-dir")
@click.option("--data-path")
@click.option("--output-path")
@click.option("--node-selector", multiple=True, help="KEY=VALUE: only nodes with the label.")
@click.option(
    "--port", "ports", multiple=True, help="NAME=PORT: open it in a browser (/endpoints/...)."
)
@click.option(
    "--whole-nodes",
    is_flag=True,
    default=None,
    help="With more than one worker: each worker gets a node of its own, all of it.",
)
@click.option(
    "--same-switch",
    is_flag=True,
    default=None,
    help="With more than one worker: all workers under one network switch (it waits for one).",
)
@click.option("--preemptible/--guaranteed", default=None, help="May borrow GPUs beyond the quota.")
@click.option("--priority", type=int)
@click.option("--retries", "max_retries", type=int, help="Retries for infrastructure failures.")
@click.option(
    "--retry-on",
    type=click.Choice(["infrastructure", "any"]),
    help="Spend retries on infrastructure failures (default) or on any failure, user errors "
    "(a command exiting 3) too.",
)
@click.option("--wall-time", "max_wall_time", help="At most this long: 3600, 90m, 2h30m, 2d.")
@click.option("--idempotency-key", help="Repeat the submission safely: the same key, one job.")
@click.option("--wait", is_flag=True, help="Wait for the end; exit with the job's exit code.")
@click.option("--poll", default=1.0, show_default=True, help="Seconds between looks (--wait).")
@click.option("--json", "as_json", is_flag=True, help="Print the API's JSON of the job.")
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
def submit(manifest, idempotency_key, wait, poll, as_json, command, **flags) -> None:
    """Submit a job from flags or a manifest (-f job.yaml): trainyard submit --vc vision
    --gpus 8 -- python train.py. Prints the job's id."""
    flag_names = _flag_names(click.get_current_context().command, flags)
    body = build_submission(manifest, command, **flags)
    client = Api(Config.load())
    headers = {"Idempotency-Key": idempotency_key} if idempotency_key else None
    with fields_named(flag_names):
        job = client.post("jobs/", body, headers)
    if as_json:
        click.echo(json.dumps(job, indent=2, sort_keys=True))
    else:
        click.echo(job["array"] if "jobs" in job else job["id"])
    for warning in job.get("warnings") or ():
        err.print(f"warning: {warning}", highlight=False)
    if job.get("admission") == "meets":
        err.print(
            f"deadline: meets it with at least {job['admission_share']} workers from now "
            f"(earliest finish {job['earliest_finish']})",
            highlight=False,
        )
    if "jobs" in job:  # a job array (array: in the manifest) answers its id and its jobs'
        err.print(f"array {job['array']}: {job['size']} jobs", highlight=False)
        if wait:
            raise click.exceptions.Exit(wait_for_array(client, job["array"], poll))
        return
    if wait:
        ended = wait_for_end(client, job["id"], poll)
        code = WAIT_EXIT_CODES.get(ended["status"])
        if code is None:  # failed: the job's own exit code
            code = ended.get("exit_code") or FAILED
            code = code if 0 < code < 256 else FAILED
        raise click.exceptions.Exit(code)


@contextmanager
def fields_named(names: dict[str, str]) -> Iterator[None]:
    """The API's field errors told with the names the user wrote (``--gpus``, not
    ``gpus_per_worker``)."""
    try:
        yield
    except CliError as refused:
        if refused.exit_code != BAD_INPUT or not isinstance(refused.body, dict):
            raise
        raise CliError("\n".join(describe_errors(refused.body, names)), BAD_INPUT) from None


def _flag_names(command: click.Command, flags: dict[str, Any]) -> dict[str, str]:
    """The flag each submission field was given by (``gpus_per_worker``: ``--gpus``); the
    fields left to the manifest keep their names."""
    given = {name for name, value in flags.items() if value not in (None, ())}
    return {
        param.name: max(param.opts, key=len)
        for param in command.params
        if isinstance(param, click.Option) and param.name in given
    }


def wait_for_array(client: Api, array_id: str, poll: float) -> int:
    """Follow an array until every task has ended: 0 when all finished, else FAILED."""
    last = None
    with err.status(f"array {array_id}: submitted") as status:
        while True:
            counts = client.get(f"job-arrays/{array_id}/")["counts"]
            said = ", ".join(f"{count} {name}" for name, count in sorted(counts.items()))
            if said != last:
                err.print(f"{time.strftime('%H:%M:%S')} array {array_id}: {said}", highlight=False)
                last = said
            status.update(f"array {array_id}: {said}")
            if all(name in TERMINAL for name in counts):
                return 0 if set(counts) == {"finished"} else FAILED
            time.sleep(poll)


def wait_for_end(client: Api, job_id: str, poll: float) -> dict:
    """Follow the job until it ends (or is paused), saying each change on stderr."""
    last = None
    with err.status(f"{job_id}: submitted") as status:
        while True:
            job = client.get(f"jobs/{job_id}/")
            said = job.get("insight_message") or job.get("status_message") or ""
            if job["status"] != last:
                err.print(f"{time.strftime('%H:%M:%S')} {job_id} {job['status']}"
                          + (f": {said}" if said else ""), highlight=False)  # fmt: skip
                last = job["status"]
            status.update(f"{job_id}: {job['status']}" + (f" ({said})" if said else ""))
            if job["status"] in (*TERMINAL, "paused"):
                return job
            time.sleep(poll)


@click.command()
@click.argument("job_id")
@click.option("-f", "--follow", is_flag=True, help="Keep printing as the job writes, to its end.")
@click.option("--worker", type=int, help="One worker's log (default: all; with -f, worker 0).")
@click.option("--poll", default=1.0, show_default=True, help="Seconds between looks (-f).")
def logs(job_id: str, follow: bool, worker: int | None, poll: float) -> None:
    """A job's log: every worker's, or one worker's; with -f, followed to the job's end.
    JOB_ID is a job's id, or an array's task as ARRAY_INDEX."""
    client = Api(Config.load())
    with arrays_explained(client, job_id):
        _print_log(client, task_job_id(client, job_id), follow, worker, poll)


def _print_log(client: Api, job_id: str, follow: bool, worker: int | None, poll: float) -> None:
    if worker is None and not follow:
        response = client.request("GET", f"jobs/{job_id}/log/", stream=True)
        for chunk in response.iter_content(64 * 1024):
            sys.stdout.buffer.write(chunk)
        sys.stdout.flush()
        return
    offset = 0
    while True:
        chunk = client.get(
            f"jobs/{job_id}/log/tail/", worker=worker or 0, offset=offset, max_bytes=LOG_CHUNK
        )
        if chunk["text"]:
            sys.stdout.write(chunk["text"])
            sys.stdout.flush()
        offset = chunk["next_offset"]
        if chunk["complete"] or (not follow and offset >= chunk["size"]):
            return
        if offset >= chunk["size"]:
            time.sleep(poll)


def task_job_id(client: Api, given: str) -> str:
    """The job a user names: a job's id, or an array's task as ARRAY_INDEX (Slurm's way,
    ``k3m9x2q7ab_3``: task 3 of array k3m9x2q7ab)."""
    array_id, underscore, index = given.rpartition("_")
    if not underscore or not array_id or not index.isdigit():
        return given
    found = client.get("jobs/", array=array_id, array_index=index).get("results") or []
    if not found:
        size = client.get(f"job-arrays/{array_id}/")["size"]  # 404: no such array
        raise CliError(f"Array {array_id} has no task {index}: its tasks are 0 to {size - 1}.")
    return found[0]["id"]


@contextmanager
def arrays_explained(client: Api, given: str) -> Iterator[None]:
    """A job id that is an array's own id is explained, not answered "No Job matches"."""
    try:
        yield
    except CliError as refused:
        if refused.status != 404:
            raise
        try:
            array = client.get(f"job-arrays/{given}/")
        except CliError:
            raise CliError(f"No job {given} of yours.") from None
        raise CliError(
            f"{given} is a job array of {array['size']} tasks, not a job: name a task as "
            f"{given}_0 to {given}_{array['size'] - 1}, or list them with trainyard jobs "
            f"--array {given}."
        ) from None


def ssh_argv(endpoint: str, extra: tuple[str, ...]) -> list[str]:
    """OpenSSH's argv for the job's SSH endpoint (``ssh -p 2222 mia+job@gateway``), then
    the user's own arguments (options such as ``-L 8888:localhost:8888``, or a command:
    OpenSSH reads options after the destination too)."""
    argv = shlex.split(endpoint)
    if not argv or argv[0] != "ssh":
        raise CliError(f"The job's SSH endpoint is not an ssh command line: {endpoint!r}")
    return [*argv, *extra]
