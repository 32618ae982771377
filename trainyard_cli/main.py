"""``trainyard``: Trainyard from a terminal or a script, through the public REST API only.

    trainyard login --url https://trainyard.example.com
    trainyard submit -f job.yaml --wait        # exits with the job's exit code
    trainyard jobs --status running --json
    trainyard logs JOB -f --worker 1
    trainyard kill JOB [JOB...]

Exit codes: 0 done; 1 refused or failed; 2 bad input (the API's field messages are
printed); 3 the server cannot be reached; 4 not signed in or not allowed. With
``--wait``, the job's own: 0 finished, its exit code when it failed (1 without one), 124
past its wall time, 130 killed.
"""

from __future__ import annotations

import json
import os
import socket
import sys
from typing import Any

import click
import requests
from rich.console import Console
from rich.table import Table

from trainyard_cli import jobs as job_commands
from trainyard_cli.client import (
    BAD_INPUT,
    FAILED,
    NOT_SIGNED_IN,
    Api,
    CliError,
    Config,
    config_path,
)
from trainyard_cli.manifest import duration_seconds

out = Console()
err = Console(stderr=True)


class TrainyardGroup(click.Group):
    """Every command's CliError printed (in the API's words) and turned into its exit code;
    ``list`` is ``jobs``, as other schedulers' users type it."""

    ALIASES = {"list": "jobs"}

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        return super().get_command(ctx, self.ALIASES.get(cmd_name, cmd_name))

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except CliError as error:
            for line in error.message.splitlines():
                err.print(f"[red]error:[/red] {line}", highlight=False, markup=True)
            raise click.exceptions.Exit(error.exit_code) from None


@click.group(cls=TrainyardGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="trainyard")
def cli() -> None:
    """Trainyard: submit, follow and manage training jobs on a shared GPU cluster."""


def api(require_token: bool = True) -> Api:
    return Api(Config.load(), require_token)


def print_json(data: object) -> None:
    click.echo(json.dumps(data, indent=2, sort_keys=True, default=str))


# --- signing in ---------------------------------------------------------------------------


@cli.command()
@click.option("--url", help="Trainyard's address, e.g. https://trainyard.example.com")
@click.option("--token", help="Store this API token (made on the dashboard) instead.")
@click.option("--username", "-u", help="Sign in with a password to make a token.")
@click.option("--password-stdin", is_flag=True, help="Read the password from stdin.")
def login(url: str | None, token: str | None, username: str | None, password_stdin: bool) -> None:
    """Store the URL and a token in the user's config (TRAINYARD_URL and TRAINYARD_TOKEN
    override them)."""
    config = Config.load()
    config.url = (url or config.url or "").rstrip("/")
    if not config.url:
        config.url = click.prompt("Trainyard URL").rstrip("/")
    if token is None:
        username = username or click.prompt("Username")
        password = (
            sys.stdin.readline().rstrip("\n")
            if password_stdin
            else click.prompt("Password", hide_input=True)
        )
        token = _new_token(config.url, username, password)
    config.token = token
    me = Api(config).get("me/")
    path = config.save()
    out.print(f"Signed in to {config.url} as [bold]{me['username']}[/bold]; token in {path}")


def _new_token(url: str, username: str, password: str) -> str:
    """Sign in with the password, then make a named API token for this machine."""
    web = requests.Session()
    anonymous = Api(Config(url=url), require_token=False)
    anonymous.session = web
    anonymous.request("GET", f"{url}/login", headers={"Accept": "text/html"})  # CSRF cookie
    csrf = {"X-CSRFToken": web.cookies.get("csrftoken", ""), "Referer": f"{url}/login"}
    try:
        anonymous.post("auth/login/", {"username": username, "password": password}, csrf)
    except CliError as error:
        raise CliError(error.message, NOT_SIGNED_IN) from None
    csrf["X-CSRFToken"] = web.cookies.get("csrftoken", "")
    name = f"trainyard CLI on {socket.gethostname()} ({os.getpid()})"
    return anonymous.post("me/tokens/", {"name": name[:100]}, csrf)["token"]


# --- jobs ---------------------------------------------------------------------------------

cli.add_command(job_commands.submit)
cli.add_command(job_commands.logs)


@cli.command("jobs")
@click.option("--vc", help="Only this VC's jobs.")
@click.option("--status", "statuses", multiple=True, help="Only jobs in this status (repeat).")
@click.option("--owner", help="Only this user's jobs (VC admins).")
@click.option("--type", "job_type", help="batch, interactive or distributed.")
@click.option("--array", "array_id", help="Only this job array's tasks.")
@click.option("--limit", default=50, show_default=True, help="At most this many, newest first.")
@click.option("--json", "as_json", is_flag=True, help="Print the API's JSON.")
def list_jobs(vc, statuses, owner, job_type, array_id, limit, as_json) -> None:
    """The jobs I may see, newest first (also: trainyard list)."""
    params = {
        "vc": vc, "owner": owner, "type": job_type, "status": list(statuses) or None,
        "array": array_id,
    }  # fmt: skip
    found = list(api().pages("jobs/", limit=limit, **{k: v for k, v in params.items() if v}))
    if as_json:
        print_json(found)
        return
    table = Table("ID", "Name", "VC", "Owner", "Status", "GPUs", "Submitted", box=None)
    for job in found:
        gpus = f"{job['workers']}x{job['gpus_per_worker']} {job['gpu_type']}"
        status = job["status"] + (f" ({job['exit_code']})" if job.get("exit_code") else "")
        table.add_row(job["id"], job["name"], job["vc"], job["owner"], status, gpus,
                      job["submitted_at"][:19].replace("T", " "))  # fmt: skip
    out.print(table if found else "No jobs.")


SHOWN_FIELDS = (
    "id", "name", "owner", "vc", "status", "status_message", "insight_message",
    "repair_message", "image", "command", "gpu_type", "workers", "gpus_per_worker",
    "cpus_per_worker", "memory_per_worker", "exit_code", "failure_class", "failure_rule",
    "submitted_at", "started_at", "finished_at",
)  # fmt: skip


@cli.command()
@click.argument("job_id")
@click.option("--json", "as_json", is_flag=True, help="Print the API's JSON.")
def show(job_id: str, as_json: bool) -> None:
    """A job's detail, and its attempts. JOB_ID is a job's id, or an array's task as
    ARRAY_INDEX."""
    client = api()
    with job_commands.arrays_explained(client, job_id):
        job_id = job_commands.task_job_id(client, job_id)
        job = client.get(f"jobs/{job_id}/")
    attempts = client.get(f"jobs/{job_id}/attempts/")
    if as_json:
        print_json(job | {"attempts": attempts})
        return
    table = Table(show_header=False, box=None)
    for field in SHOWN_FIELDS:
        if job.get(field) not in (None, "", []):
            table.add_row(f"[bold]{field}[/bold]", str(job[field]))
    for name, value in (job.get("endpoints") or {}).items():
        if name == "ports":
            value = "\n".join(f"{port['name']} ({port['port']}): {port['url']}" for port in value)
        if value:
            table.add_row(f"[bold]{name}[/bold]", str(value).rstrip())
    out.print(table)
    if attempts:
        runs = Table("Attempt", "Nodes", "Started", "Ended", "Exit", "Why", box=None)
        for attempt in attempts:
            runs.add_row(str(attempt["number"]), ", ".join(attempt["nodes"]),
                         str(attempt["started_at"])[:19], str(attempt["ended_at"] or "")[:19],
                         str(attempt["exit_code"] if attempt["exit_code"] is not None else ""),
                         attempt["message"])  # fmt: skip
        out.print(runs)


CHANGE_FLAGS = {
    "priority": "--priority", "max_wall_time": "--wall-time", "max_retries": "--retries",
}  # fmt: skip


@cli.command()
@click.argument("job_id")
@click.option("--priority", type=int, help="Order within the VC's queue (-100 to 100).")
@click.option("--wall-time", help="At most this long: 3600, 90m, 2h30m, 2d (the VC's limit).")
@click.option("--retries", type=int, help="Retries it may still spend, in all.")
def change(job_id: str, priority: int | None, wall_time: str | None, retries: int | None) -> None:
    """Change a submitted job's priority, wall time or retries (VC admins); the job's
    history records it."""
    body: dict[str, int] = {}
    if priority is not None:
        body["priority"] = priority
    if wall_time is not None:
        body["max_wall_time"] = duration_seconds(wall_time, "--wall-time")
    if retries is not None:
        body["max_retries"] = retries
    if not body:
        raise CliError("Give what to change: --priority, --wall-time or --retries", BAD_INPUT)
    client = api()
    with job_commands.arrays_explained(client, job_id):
        job_id = job_commands.task_job_id(client, job_id)
        with job_commands.fields_named(CHANGE_FLAGS):
            job = client.request("PATCH", f"jobs/{job_id}/", json=body).json()
    out.print(
        f"{job['id']}: priority {job['priority']}, wall time {job['max_wall_time']} s, "
        f"retries {job['retries_used']} of {job['max_retries']} used"
    )


def _act(action: str, job_ids: tuple[str, ...], reason: str) -> None:
    client = api()
    if len(job_ids) == 1:
        job = client.post(f"jobs/{job_ids[0]}/{action}/", {"reason": reason})
        out.print(f"{job['id']}: {job['status']}")
        return
    answer = client.post("jobs/batch/", {"action": action, "ids": list(job_ids), "reason": reason})
    refused = [result for result in answer["results"] if not result["ok"]]
    for result in answer["results"]:
        said = result["status"] if result["ok"] else f"[red]{result['error']}[/red]"
        out.print(f"{result['id']}: {said}")
    if refused:
        raise click.exceptions.Exit(FAILED)


def _action_command(action: str, help_text: str) -> click.Command:
    @click.argument("job_ids", nargs=-1, required=True)
    @click.option("--reason", default="", help="Why, for the job's history.")
    def command(job_ids: tuple[str, ...], reason: str) -> None:
        _act(action, job_ids, reason)

    command.__doc__ = help_text
    return cli.command(action)(command)


_action_command("kill", "Kill one or many jobs.")
_action_command("pause", "Pause one or many jobs: their GPUs are released, the jobs kept.")
_action_command("resume", "Requeue one or many paused jobs.")
_action_command("approve", "Let jobs past the VC's per-user GPU limit (VC admins).")


@cli.command()
@click.argument("vc")
@click.option("--json", "as_json", is_flag=True, help="Print the API's JSON.")
def queue(vc: str, as_json: bool) -> None:
    """A VC's waiting jobs in the order its scheduler considers them, and why each waits."""
    entries = api().get(f"vcs/{vc}/queue/")
    if as_json:
        print_json(entries)
        return
    table = Table("#", "ID", "Name", "Owner", "GPUs", "Waiting because", "Likely start", box=None)
    for entry in entries:
        gpus = f"{entry['workers']}x{entry['gpus_per_worker']} {entry['gpu_type']}"
        why = entry["insight_message"] or entry["status_message"]
        table.add_row(str(entry["position"]), entry["job_id"], entry["name"], entry["owner"],
                      gpus, why, str(entry["estimated_start_at"] or "")[:19])  # fmt: skip
    out.print(table if entries else f"Nothing waits in VC {vc}.")


@cli.command(context_settings={"ignore_unknown_options": True})
@click.argument("job_id")
@click.argument("ssh_args", nargs=-1, type=click.UNPROCESSED)
def ssh(job_id: str, ssh_args: tuple[str, ...]) -> None:
    """Open an SSH session into a running job (its first worker) with OpenSSH's ssh,
    through the job's endpoint; arguments after the job go to ssh."""
    job = api().get(f"jobs/{job_id}/")
    command = (job.get("endpoints") or {}).get("ssh")
    if not command:
        raise CliError(f"Job {job_id} is {job['status']}: SSH reaches running jobs only")
    argv = job_commands.ssh_argv(command, ssh_args)
    try:
        os.execvp(argv[0], argv)
    except OSError as error:
        raise CliError(f"Cannot run {argv[0]}: {error.strerror}") from None


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Print the API's JSON.")
def usage(as_json: bool) -> None:
    """My VCs' quota, use and free GPUs per GPU type, and the cluster's."""
    client = api()
    me = client.get("me/")
    vcs = [client.get(f"vcs/{vc['name']}/") for vc in me["vcs"]]
    cluster = client.get("cluster/summary/")["gpu_types"]
    if as_json:
        print_json({"vcs": vcs, "cluster": cluster})
        return
    table = Table("VC", "GPU type", "Quota", "Used", "Queued", "Free", "Idle in cluster",
                  title="My VCs", box=None)  # fmt: skip
    for vc in vcs:
        for row in vc.get("resources", []):
            table.add_row(vc["name"], row["gpu_type"], str(row["quota"]["gpus"]),
                          str(row["used"]["gpus"]), str(row["queued"]["gpus"]),
                          str(row["free"]["gpus"]), str(row["cluster_idle_gpus"]))  # fmt: skip
    out.print(table)
    totals = Table("GPU type", "Nodes", "GPUs", "Used", "Free", title="The cluster", box=None)
    for row in cluster:
        totals.add_row(row["gpu_type"], str(row["nodes"]), str(row["gpus_total"]),
                       str(row["gpus_used"]), str(row["gpus_free"]))  # fmt: skip
    out.print(totals)


@cli.command("config")
def show_config() -> None:
    """Where the config is, and the URL in force."""
    config = Config.load()
    token = "set" if config.token else "(none)"
    out.print(f"{config_path()}: url {config.url or '(none)'}, token {token}")


def main() -> None:
    cli(prog_name="trainyard")


__all__ = ["BAD_INPUT", "cli", "main"]
