"""A job's status machine: a forbidden change is refused and writes nothing, and no module
but backend/jobs/transitions.py writes a job's status."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from backend.jobs import transitions
from backend.jobs.models import Job, JobEvent, JobStatus
from backend.jobs.transitions import ALLOWED, ForbiddenTransition, bulk_transition, transition
from tests.backend.jobs_support import make_job

BACKEND = Path(__file__).resolve().parents[3] / "backend"
# Writes storage runs' status (Scan, ExpiryRun), not a job's: test_status_writers.py.
STORAGE_RUNS_WRITER = BACKEND / "storage" / "runs.py"


def test_every_status_has_its_row_and_the_ends_lead_nowhere():
    assert set(ALLOWED) == set(JobStatus.values)
    for status in (JobStatus.FINISHED, JobStatus.FAILED, JobStatus.KILLED, JobStatus.TIMEOUT):
        assert ALLOWED[status] == frozenset()


@pytest.mark.django_db
def test_an_allowed_transition_writes_the_status_and_its_event(world):
    job = make_job(world, status=JobStatus.QUEUED)

    transition(job, JobStatus.PAUSED, actor=world.member, reason="later", status_message="later")

    stored = Job.objects.get(pk=job.pk)
    assert (stored.status, stored.status_message) == (JobStatus.PAUSED, "later")
    event = JobEvent.objects.get(job=job)
    assert (event.from_status, event.to_status, event.actor_name, event.reason) == (
        JobStatus.QUEUED, JobStatus.PAUSED, world.member.username, "later"
    )  # fmt: skip


@pytest.mark.django_db
def test_a_forbidden_transition_is_refused_and_writes_nothing(world):
    job = make_job(world, status=JobStatus.FINISHED, exit_code=0)

    with pytest.raises(ForbiddenTransition, match="cannot go from finished to running"):
        transition(job, JobStatus.RUNNING, actor=None, reason="again", exit_code=None)

    stored = Job.objects.get(pk=job.pk)
    assert (stored.status, stored.exit_code) == (JobStatus.FINISHED, 0)
    assert not JobEvent.objects.filter(job=job).exists()


@pytest.mark.django_db
def test_a_bulk_transition_with_one_forbidden_change_writes_none(world):
    queued = make_job(world, status=JobStatus.QUEUED)
    killed = make_job(world, status=JobStatus.KILLED)

    with pytest.raises(ForbiddenTransition):
        bulk_transition(
            [(queued, JobStatus.SCHEDULING), (killed, JobStatus.SCHEDULING)],
            actor=None,
            reason="placed",
            fields=[],
        )

    assert set(Job.objects.values_list("status", flat=True)) == {
        JobStatus.QUEUED, JobStatus.KILLED
    }  # fmt: skip
    assert not JobEvent.objects.exists()


# --- one writer ----------------------------------------------------------------------------


def _module_tuples(tree: ast.Module) -> dict[str, ast.expr]:
    """Module-level names bound to a literal (the field lists handed to bulk_update)."""
    bound: dict[str, ast.expr] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
            if isinstance(target, ast.Name):
                bound[target.id] = node.value
    return bound


def _names_status(value: ast.expr | None, bound: dict[str, ast.expr]) -> bool:
    if isinstance(value, ast.Name) and value.id in bound:
        value = bound[value.id]
    return any(
        isinstance(node, ast.Constant) and node.value == "status" for node in ast.walk(value)
    ) if value is not None else False  # fmt: skip


def status_writers(source: str) -> list[str]:
    """Where the source writes a job's status: ``x.status = ...``, ``setattr(x, "status",
    ...)``, ``.update(status=...)`` (and ``update_or_create``), ``bulk_update`` with a
    field list naming it. Storage scan runs (``RunStatus``) are not jobs."""
    tree = ast.parse(source)
    bound = _module_tuples(tree)
    found = []
    for node in ast.walk(tree):
        targets = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        for target in targets:
            job_status = isinstance(target, ast.Attribute) and target.attr == "status"
            if job_status and "RunStatus" not in ast.unparse(node.value):
                found.append(f"line {node.lineno}: {ast.unparse(node)}")
        if not isinstance(node, ast.Call):
            continue
        name = node.func.attr if isinstance(node.func, ast.Attribute) else ""
        name = name or (node.func.id if isinstance(node.func, ast.Name) else "")
        if name == "setattr" and len(node.args) >= 2 and _names_status(node.args[1], {}):
            found.append(f"line {node.lineno}: {ast.unparse(node)}")
        if name in ("update", "update_or_create"):
            for keyword in node.keywords:
                if keyword.arg == "status" and "RunStatus" not in ast.unparse(keyword.value):
                    found.append(f"line {node.lineno}: {ast.unparse(node)}")
        if name == "bulk_update":
            fields = node.args[1] if len(node.args) > 1 else None
            fields = fields or next((k.value for k in node.keywords if k.arg == "fields"), None)
            if _names_status(fields, bound):
                found.append(f"line {node.lineno}: {ast.unparse(node)}")
    return found


def test_the_writer_finder_finds_each_kind_of_write():
    source = (
        "FIELDS = ('status', 'placement')\n"
        "job.status = JobStatus.QUEUED\n"
        "setattr(job, 'status', 'queued')\n"
        "Job.objects.filter(pk=1).update(status='killed')\n"
        "Job.objects.bulk_update(jobs, ['status'])\n"
        "Job.objects.bulk_update(jobs, FIELDS)\n"
        "run.status = RunStatus.DONE\n"
        "Job.objects.filter(status='queued').update(priority=1)\n"
    )
    assert len(status_writers(source)) == 5


def test_no_module_but_transitions_writes_a_job_status():
    writers = {
        str(path.relative_to(BACKEND)): found
        for path in sorted(BACKEND.rglob("*.py"))
        if "migrations" not in path.parts
        and path not in (Path(transitions.__file__).resolve(), STORAGE_RUNS_WRITER)
        for found in [status_writers(path.read_text())]
        if found
    }
    assert writers == {}
