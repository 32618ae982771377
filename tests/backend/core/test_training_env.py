"""The shared training environment (backend/core/training_env.py): every job account may
run its PyTorch, JupyterLab and TensorBoard, none may change it, it is built once, a
place another account could swap is refused, and a sandboxed job sees it read-only."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from backend.clusters.backends import LocalSandbox
from backend.core.training_env import TrainingEnvError, ensure_training_env, job_path
from jobmanager.backends.sandbox import Sandbox, Worker, bundle_config
from tests.jobmanager.test_local_sandbox import run_to_end, sandboxed_backend
from tests.unix_accounts import job_account, owned_directory, reachable_directory

pytestmark = pytest.mark.integration


def test_every_job_account_may_run_it_and_none_may_change_it(training_env):
    mia = job_account("mia")
    probe = "import torch, jupyterlab, tensorboard; print(torch.__version__)"

    done = subprocess.run(
        ["setpriv", f"--reuid={mia.uid}", f"--regid={mia.gid}", "--clear-groups",
         "/bin/sh", "-c", f"python -c '{probe}' && command -v jupyter && command -v tensorboard"],
        env={"PATH": job_path(), "HOME": "/"}, capture_output=True, text=True, timeout=120,
    )  # fmt: skip

    assert done.returncode == 0, done.stderr
    version, jupyter, tensorboard = done.stdout.split()
    assert version.startswith("2.13.0")
    assert (jupyter, tensorboard) == (
        f"{training_env}/bin/jupyter",
        f"{training_env}/bin/tensorboard",
    )
    for directory, _, files in os.walk(training_env):
        for path in [directory, *(os.path.join(directory, name) for name in files)]:
            info = os.lstat(path)
            assert info.st_uid == 0, path
            assert not info.st_mode & 0o022 or os.path.islink(path), path


def test_a_current_environment_is_left_as_it_is(training_env):
    started = time.monotonic()
    assert ensure_training_env(training_env) is False
    assert time.monotonic() - started < 5


def test_a_place_another_account_may_change_is_refused():
    mia = job_account("mia")
    with reachable_directory() as directory:
        theirs = owned_directory(directory / "theirs", mia, 0o755)
        with pytest.raises(TrainingEnvError, match="belongs to uid"):
            ensure_training_env(theirs / "training-env")
        assert not (theirs / "training-env").exists()
        (directory / "open").mkdir(mode=0o777)
        (directory / "open").chmod(0o777)
        with pytest.raises(TrainingEnvError, match="writable by other accounts"):
            ensure_training_env(directory / "open" / "training-env")
        assert list(Path(directory / "open").iterdir()) == []


def test_a_sandboxed_job_sees_it_read_only_wherever_it_is_kept(settings, tmp_path):
    settings.TRAINYARD_TRAINING_ENV = kept = tmp_path / "training-env"
    kept.mkdir()
    sandbox = Sandbox(tmp_path / ".runc", "trainyard-test", LocalSandbox.from_settings().paths)
    worker = Worker(
        "c", ["true"], {}, "/", 61001, 61001, (), "h", (), (), millicpus=1000, memory_mib=64
    )

    mounts = {m["destination"]: m for m in bundle_config(sandbox, worker)["mounts"]}

    assert mounts[str(kept)]["source"] == str(kept)
    assert "ro" in mounts[str(kept)]["options"]


def test_a_sandboxed_job_runs_it_and_cannot_change_it(training_env, host_tmp):
    paths, path = LocalSandbox.from_settings().paths, job_path()
    with sandboxed_backend(host_tmp, sandbox_readonly_paths=paths, job_path=path) as backend:
        code, _, log = run_to_end(
            backend,
            "python -c 'import torch; print(\"torch\", torch.__version__)'; "
            f"touch {training_env}/bin/python || echo READ-ONLY",
        )

    assert code == 0, log
    assert "torch 2.13.0" in log and "READ-ONLY" in log, log
