"""The shared training environment: a virtualenv of the system's Python with PyTorch (CPU),
JupyterLab and TensorBoard, pinned in ``deploy/training-env/``, and the example training
script in ``examples/``, at TRAINYARD_TRAINING_ENV
(``/opt/trainyard/training-env`` where the portal is root). ``make run`` builds it
(``manage.py build_training_env``); every job account may use it.

It lies outside any private home (root's is 0700 on many hosts), is the builder's (root's)
and readable and executable by all, writable by no one else: a job may run it, not change
what other jobs run. Its ``bin/`` comes first on a local job's PATH (``job_path``), so that
``python``, ``jupyter`` and ``tensorboard`` are its own; a sandboxed job sees it read-only.

A stamp inside records the requirements it was built from: while they are the same,
ensuring it costs a read; when they change, it is built again from scratch (about a
minute from the local wheels); a changed example is copied again. One build at a time on
a host (a lock file beside it).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import stat
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

from django.conf import settings

from jobmanager.backends.local import JOB_PATH

# Every account may run the system's interpreter; the portal's own may lie under /root.
SYSTEM_PYTHON = "/usr/bin/python3"
REPOSITORY = Path(__file__).resolve().parents[2]
REQUIREMENTS_DIR = REPOSITORY / "deploy" / "training-env"
# The documents' example training scripts, copied in so that every job account may run them
# (the repository may lie under root's home).
EXAMPLES = (
    REPOSITORY / "examples" / "train_mnist_like.py",
    REPOSITORY / "examples" / "train_elastic.py",
)
STAMP = ".trainyard-requirements"
PUBLIC_UMASK = 0o022


class TrainingEnvError(Exception):
    """The training environment cannot be built where it is asked for (says why)."""


def job_path() -> str:
    """A local job's PATH: the training environment's ``bin/``, then the system's."""
    return f"{settings.TRAINYARD_TRAINING_ENV}/bin:{JOB_PATH}"


def requirements_text() -> str:
    """What the environment is built from (its requirements and every package's pin)."""
    sources = (REQUIREMENTS_DIR / "requirements.txt", REQUIREMENTS_DIR / "constraints.txt")
    return "".join(source.read_text() for source in sources)


def is_current(path: Path) -> bool:
    """Whether ``path`` holds an environment built from today's requirements, with
    today's examples."""
    try:
        if (path / STAMP).read_text() != requirements_text():
            return False
        return all(
            (path / "examples" / example.name).read_bytes() == example.read_bytes()
            for example in EXAMPLES
        )
    except OSError:
        return False


def ensure_training_env(path: Path, say: Callable[[str], None] = print) -> bool:
    """Build the environment at ``path`` unless it is current; True when it was built.
    Raises TrainingEnvError where another account could change what lies there."""
    if is_current(path):
        return False
    _refuse_foreign_parents(path)
    _make_public_parents(path)
    with _build_lock(path):
        if is_current(path):  # built meanwhile by another process
            return False
        _install_packages(path, say)
        (path / "examples").mkdir(exist_ok=True)
        for example in EXAMPLES:
            shutil.copy(example, path / "examples" / example.name)
        make_public(path)
        (path / STAMP).write_text(requirements_text())
        (path / STAMP).chmod(0o644)
    return True


def _install_packages(path: Path, say: Callable[[str], None]) -> None:
    """A fresh virtualenv at ``path`` with the pinned packages, unless it has them."""
    try:
        if (path / STAMP).read_text() == requirements_text():
            return
    except OSError:
        pass
    say(f"Building the training environment at {path} (PyTorch, JupyterLab, TensorBoard)...")
    shutil.rmtree(path, ignore_errors=True)
    _run([SYSTEM_PYTHON, "-m", "venv", str(path)])
    requirements = REQUIREMENTS_DIR / "requirements.txt"
    constraints = REQUIREMENTS_DIR / "constraints.txt"
    _run(
        [str(path / "bin" / "python"), "-m", "pip", "install", "--quiet", "--no-input",
         "--disable-pip-version-check", "-r", str(requirements), "-c", str(constraints)]
    )  # fmt: skip


def make_public(path: Path) -> None:
    """Everything under ``path`` readable (and, where its owner may, executable) by all,
    writable by its owner alone."""
    for directory, _subdirectories, files in os.walk(path):  # links are not followed
        os.chmod(directory, 0o755)
        for name in files:
            file = os.path.join(directory, name)
            mode = os.lstat(file).st_mode
            if stat.S_ISLNK(mode):
                continue
            executable = 0o111 if mode & stat.S_IXUSR else 0
            os.chmod(file, (stat.S_IMODE(mode) | 0o444 | executable) & ~0o022)


def _run(command: list[str]) -> None:
    done = subprocess.run(command, umask=PUBLIC_UMASK, capture_output=True, text=True)
    if done.returncode != 0:
        raise TrainingEnvError(
            f"{' '.join(command)} exited {done.returncode}:\n{done.stdout}{done.stderr}"
        )


def _refuse_foreign_parents(path: Path) -> None:
    """Every existing directory above ``path`` must be root's or ours, and writable by
    nobody else (a sticky one like /tmp excepted): otherwise another account could swap
    the environment every job runs."""
    for parent in path.absolute().parents:
        try:
            info = parent.stat()
        except FileNotFoundError:
            continue
        if info.st_uid not in (0, os.geteuid()):
            raise TrainingEnvError(f"{parent} belongs to uid {info.st_uid}: choose another place.")
        if info.st_mode & 0o022 and not info.st_mode & stat.S_ISVTX:
            raise TrainingEnvError(f"{parent} is writable by other accounts: choose another place.")


def _make_public_parents(path: Path) -> None:
    """The missing directories above ``path``, made 0755 whatever the umask."""
    for parent in reversed(path.absolute().parents):
        if not parent.exists():
            parent.mkdir()
            parent.chmod(0o755)


@contextlib.contextmanager
def _build_lock(path: Path) -> Iterator[None]:
    lock = path.parent / f".{path.name}.lock"
    descriptor = os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX)
        yield
    finally:
        os.close(descriptor)
