"""The init process of one local-backend worker: runs a command and leaves nothing behind.

    python -m jobmanager.backends.local_init --status-file F --log-file L \
        [--kill-after SECONDS] [--confinement C] [--pid-file P] [--go-fd N]
        [--notify-socket S] -- <argv>

It makes itself a child subreaper (Linux), so that descendants orphaned on the way are
reparented to it and reaped; starts the command in a process group of its own, with
stdout and stderr appended to the log file; forwards SIGTERM and SIGINT to that group;
and once the command exits, SIGTERMs whatever is left of the group and of its
descendants, SIGKILLs it after ``--kill-after`` seconds, writes the exit code and the end
time to the status file (atomically: a temporary file renamed) and exits with that code.
A command killed by signal N ends with 128 + N, as a shell reports it; one that could not
be started (or confined) ends with 127, the reason in the log.

The command runs confined as ``--confinement`` (a JSON file, see ``confine.py``) says: in
the child it forks for it, the init joins the worker's cgroup or sets its rlimits, drops
to the owner's account for good, enters the working directory as the owner and execs the
command with the job's environment. The init itself stays root (where it was started as
root), out of the job's reach: a process of another uid can neither signal nor trace it,
and it keeps its state in files the job cannot write. Without ``--confinement`` the
command runs as the caller, in its directory, with its environment.

A confinement that names a ``sandbox`` (a runc container's bundle) runs the worker in that
container instead (``SandboxedInit``): the init starts it detached, waits for its first
process (``tini``, the container's pid 1, reparented to the init), forwards stops to it,
notes a kill for memory in its cgroup as the status's ``reason`` (``OOMKilled: ...``) and
deletes the container, whatever is left of it killed with it.

With ``--notify-socket`` it reports its end, once the status file is written, to a Unix
datagram socket (``local_ends`` listens there), so that the end is noticed at once.

With ``--pid-file`` it first detaches: it forks, the parent writes the child's pid to the
file and exits, so that whoever started it has no child left to reap, and the child leads
a session of its own.

With ``--go-fd`` it waits, once detached, until ``go`` is written to that descriptor
(a pipe from whoever started it) before it starts anything: the backend records the
init's pid first, so that no command ever runs that the backend's records do not name.
Should the pipe close without ``go`` (the backend died before recording it), the init
exits at once, having run nothing.

Only the standard library is imported (and ``confine.py``, loaded by path), so that it
runs isolated (``python -I -S``) from whatever the job's environment holds.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib.util
import json
import os
import signal
import sys
import time
from types import ModuleType, SimpleNamespace
from typing import TYPE_CHECKING


def _load_sibling(name: str) -> ModuleType:
    """``<name>.py`` beside this file, loaded by path: running isolated, the init has no
    package to import it from."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), f"{name}.py")
    spec = importlib.util.spec_from_file_location(f"trainyard_{name}", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while building
    spec.loader.exec_module(module)
    return module


if TYPE_CHECKING:
    # The type checker reads the same files as modules of the package.
    from jobmanager.backends import confine, runc
else:
    confine = _load_sibling("confine")
    runc = _load_sibling("runc")

PR_SET_CHILD_SUBREAPER = 36
FORWARDED_SIGNALS = (signal.SIGTERM, signal.SIGINT)
POLL_SECONDS = 0.05
TINI_READY_SECONDS = 5.0  # at most, for a sandbox's tini to take signals (it takes ms)
KILL_WAIT = 5.0  # seconds for SIGKILLed processes to be gone
CANNOT_RUN = 127  # as a shell reports a command it cannot find or run


def write_atomically(path: str, text: str) -> None:
    directory, name = os.path.split(os.fspath(path))
    partial = os.path.join(directory, f".{name}.{os.getpid()}.tmp")
    descriptor = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(descriptor, "w") as file:
        file.write(text)
        file.flush()
        os.fsync(file.fileno())
    os.replace(partial, path)


def become_subreaper() -> bool:
    """Orphaned descendants are reparented to this process rather than to pid 1."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        result: int = libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
        return result == 0
    except (OSError, AttributeError):
        return False


def exit_code_of(wait_status: int) -> int:
    code = os.waitstatus_to_exitcode(wait_status)
    return 128 - code if code < 0 else code


def descendants(root: int) -> set[int]:
    """Every process below ``root``: from each process's ``children`` files in /proc (a
    few reads per descendant), or, on a kernel without them, from a scan of every process
    in /proc; empty where there is no /proc."""
    has_children_files = os.path.exists(f"/proc/{root}/task/{root}/children")
    by_parent = None if has_children_files else _children_by_scan()
    found: set[int] = set()
    pending = [root]
    while pending:
        pid = pending.pop()
        for child in _children(pid) if by_parent is None else by_parent.get(pid, []):
            if child not in found:
                found.add(child)
                pending.append(child)
    return found


def _children(pid: int) -> list[int]:
    """The children of ``pid``, of any of its threads (a process gone meanwhile has none)."""
    try:
        threads = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []
    children: list[int] = []
    for thread in threads:
        try:
            with open(f"/proc/{pid}/task/{thread}/children") as file:
                children.extend(int(child) for child in file.read().split())
        except OSError:
            continue
    return children


def _children_by_scan() -> dict[int, list[int]]:
    """Every process's children, from each one's parent in /proc/N/stat."""
    children: dict[int, list[int]] = {}
    try:
        entries = [entry for entry in os.listdir("/proc") if entry.isdigit()]
    except OSError:
        entries = []
    for entry in entries:
        try:
            with open(f"/proc/{entry}/stat") as file:
                stat = file.read()
        except OSError:
            continue
        # The command name, in parentheses, may itself hold spaces and parentheses.
        ppid = int(stat[stat.rfind(")") + 2 :].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    return children


class Init:
    def __init__(
        self, argv: list[str], kill_after: float, confinement: confine.Confinement
    ) -> None:
        self.argv = argv
        self.kill_after = kill_after
        self.confinement = confinement
        self.group: int | None = None
        self.pending_signals: list[int] = []

    def install_signal_handlers(self) -> None:
        for signum in FORWARDED_SIGNALS:
            signal.signal(signum, self._forward)

    def run(self) -> int:
        try:
            pid, failure = self._start()
        except OSError as error:
            print(f"trainyard-init: cannot start {self.argv[0]!r}: {error}", file=sys.stderr)
            return CANNOT_RUN
        self.group = pid  # the command leads its own process group
        if failure:
            print(f"trainyard-init: {failure}", file=sys.stderr)
            self._wait_for(pid)
            return CANNOT_RUN
        for signum in self.pending_signals:
            self._signal_group(signum)
        code = self._wait_for(pid)
        self._clean_up()
        return code

    def _start(self) -> tuple[int, str]:
        """Fork the command's process, confine it and exec the command in it; its pid and
        why it could not run ("" once the exec succeeded, which closes the pipe)."""
        reader, writer = os.pipe2(os.O_CLOEXEC)
        pid = os.fork()
        if pid == 0:  # the child: nothing of the init's may run after the confinement
            os.close(reader)
            try:
                os.setpgid(0, 0)
                confine.enter(self.confinement)
                os.execvpe(self.argv[0], self.argv, self.confinement.env)
            except confine.ConfinementError as error:
                os.write(writer, str(error).encode())
            except OSError as error:
                message = f"cannot run {self.argv[0]!r}: {error.strerror or error}"
                os.write(writer, message.encode())
            finally:
                os._exit(CANNOT_RUN)
        os.close(writer)
        with contextlib.suppress(OSError):  # the child may have set it, or exec'd already
            os.setpgid(pid, pid)
        with os.fdopen(reader, "rb") as pipe:
            failure = pipe.read().decode(errors="replace")
        return pid, failure

    def _forward(self, signum: int, frame: object) -> None:
        if self.group is None:
            self.pending_signals.append(signum)  # arrived before the command started
        else:
            self._signal_group(signum)

    def _signal_group(self, signum: int) -> None:
        if self.group is None:
            return  # no command started: no group to signal
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.group, signum)

    def _wait_for(self, main: int) -> int:
        """Reap every child (adopted orphans included) until ``main`` exits."""
        while True:
            try:
                pid, status = os.waitpid(-1, 0)
            except ChildProcessError:
                return CANNOT_RUN  # cannot happen: ``main`` is a child until reaped
            if pid == main:
                return exit_code_of(status)

    def _reap(self) -> None:
        while True:
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return

    def _leftovers(self) -> set[int]:
        left = descendants(os.getpid())
        if self.group is not None:
            try:
                os.killpg(self.group, 0)
                left.add(-self.group)
            except (ProcessLookupError, PermissionError):
                pass
        return left

    def _signal_leftovers(self, signum: int) -> None:
        self._signal_group(signum)
        for pid in descendants(os.getpid()):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signum)

    def _clean_up(self) -> None:
        """What the command left running gets SIGTERM, then SIGKILL after ``kill_after``."""
        for signum, wait in ((signal.SIGTERM, self.kill_after), (signal.SIGKILL, KILL_WAIT)):
            self._reap()
            if not self._leftovers():
                return
            self._signal_leftovers(signum)
            deadline = time.monotonic() + wait
            while time.monotonic() < deadline:
                self._reap()
                if not self._leftovers():
                    return
                time.sleep(POLL_SECONDS)


class SandboxedInit(Init):
    """The init of a worker that runs in a runc container (``confinement.sandbox``): it
    starts the container detached, so that the container's first process (``tini``, which
    forwards signals to the command's group) becomes its child; once that ends (and every
    other process of its pid namespace with it), it notes a kill for memory in the
    container's cgroup and removes its cgroups and runc's record of it (the stopped
    container is deleted without a ``runc delete``)."""

    def __init__(
        self, argv: list[str], kill_after: float, confinement: confine.Confinement
    ) -> None:
        super().__init__(argv, kill_after, confinement)
        assert confinement.sandbox is not None  # only made for a sandboxed worker
        self.sandbox = confinement.sandbox
        self.reason = ""

    def _start(self) -> tuple[int, str]:
        sandbox = self.sandbox
        pid_file = os.path.join(sandbox["bundle"], runc.CONTAINER_PID_FILE)
        argv = runc.run_detached_argv(
            sandbox["root"], sandbox["bundle"], sandbox["container"], pid_file
        )
        # The mount points runc makes in the root: passable to all, listed by none (the
        # host's job directories are so). The init has no other thread to see this umask.
        previous = os.umask(0o066)
        try:
            # A vfork and exec (posix_spawn), not a fork: no copy of the init's page tables.
            runtime = os.posix_spawnp(argv[0], argv, os.environ, setpgroup=0)
        except OSError as error:
            self.reason = f"SandboxNotStarted: runc could not be run: {error}"
            raise
        finally:
            os.umask(previous)
        code = exit_code_of(os.waitpid(runtime, 0)[1])
        try:
            with open(pid_file) as file:
                pid = int(file.read().strip())
        except (OSError, ValueError):
            # The host's failure, not the command's: a reason of its own, so that the end is
            # not read as a shell that could not run the command (127).
            self.reason = f"SandboxNotStarted: runc exited with {code} before the container ran"
            return runtime, f"the sandbox did not start (runc exited with {code})"
        return pid, ""

    def _wait_for(self, main: int) -> int:
        code = super()._wait_for(main)
        if code != 0 and runc.oom_kills(self.sandbox["cgroup"]):
            self.reason = (
                "OOMKilled: the job reached its memory limit; the kernel killed a process "
                "of it (memory cgroup)"
            )
            print(f"trainyard-init: {self.reason}", file=sys.stderr)
        return code

    def _signal_group(self, signum: int) -> None:
        if self.group is not None:
            # The kernel drops a signal from outside to a pid namespace's first process
            # that neither handles nor blocks it: a stop asked as the container starts
            # would be lost (and the worker SIGKILLed after the grace) without this wait.
            _wait_until_forwarding(self.group, TINI_READY_SECONDS)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(self.group, signum)  # tini, which forwards it to the command's group

    def _clean_up(self) -> None:
        # The container stopped with its first process: the kernel killed every other
        # process of its pid namespace then, so its cgroups are empty and go now, and with
        # them runc's record of it (what ``runc delete`` would do, without a runc process).
        runc.remove_cgroups(self.sandbox["cgroup"])
        runc.forget_stopped(self.sandbox["root"], self.sandbox["container"])
        super()._clean_up()


def _wait_until_forwarding(tini: int, timeout: float) -> None:
    """Wait (at most ``timeout`` s) until ``tini`` can forward a signal: it blocks them
    before it forks its child, and forwards them to the child's process group, which is
    there once the child leads it. Return at once where tini is gone."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{tini}/task/{tini}/children") as children:
                child = children.read().split()[:1]
        except OSError:
            return
        if child and _process_group(int(child[0])) == int(child[0]):
            return
        time.sleep(0.005)


def _process_group(pid: int) -> int | None:
    """``pid``'s process group, from ``/proc/<pid>/stat``; None where it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return int(stat.read().rsplit(")", 1)[1].split()[2])
    except (OSError, ValueError, IndexError):
        return None


def detach(pid_file: str) -> None:
    """Fork; the parent records the child's pid and exits; the child leads a new session."""
    pid = os.fork()
    if pid > 0:
        write_atomically(pid_file, str(pid))
        os._exit(0)
    with contextlib.suppress(OSError):
        os.setsid()


def wait_for_go(descriptor: int) -> bool:
    """Whether ``go`` came before the pipe closed."""
    received = b""
    while len(received) < 2:
        chunk = os.read(descriptor, 2 - len(received))
        if not chunk:
            break
        received += chunk
    os.close(descriptor)
    return received == b"go"


def redirect_output(log_file: str, confinement: confine.Confinement) -> None:
    """stdout and stderr to the log, which belongs to the job's owner (opened without
    following a link the job may have put in its place); stdin from /dev/null."""
    stdio_to(confine.open_log(str(log_file), confinement.uid, confinement.gid))


def stdio_to(log: int) -> None:
    """stdout and stderr to the open ``log`` (closed here), stdin from /dev/null."""
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    os.close(null)


USAGE = (
    "usage: local_init --status-file F --log-file L [--kill-after SECONDS] [--confinement C]"
    " [--pid-file P] [--go-fd N] [--notify-socket S] -- <argv>"
)
OPTIONS = (
    "status-file", "log-file", "kill-after", "confinement", "pid-file", "go-fd", "notify-socket",
)  # fmt: skip


def parse_args(argv: list[str] | None) -> SimpleNamespace:
    """The options (``--name value`` or ``--name=value``) and the command after them.
    Parsed by hand: argparse and pathlib would be most of the init's start-up, paid by
    every worker of every job."""
    arguments = list(sys.argv[1:] if argv is None else argv)
    values: dict[str, str] = {}
    while arguments and arguments[0].startswith("--") and arguments[0] != "--":
        name, has_value, value = arguments.pop(0)[2:].partition("=")
        if name not in OPTIONS:
            _usage_error(f"unknown option --{name}")
        if not has_value:
            if not arguments:
                _usage_error(f"--{name} needs a value")
            value = arguments.pop(0)
        values[name] = value
    if arguments[:1] == ["--"]:
        arguments = arguments[1:]
    if not arguments:
        _usage_error("give the command to run after --")
    for required in ("status-file", "log-file"):
        if required not in values:
            _usage_error(f"--{required} is required")
    try:
        kill_after = float(values.get("kill-after", 5.0))
    except ValueError:
        _usage_error("--kill-after takes seconds")
    go_fd = values.get("go-fd")
    if go_fd is not None and not go_fd.isdigit():
        _usage_error("--go-fd takes a file descriptor number")
    return SimpleNamespace(
        status_file=values["status-file"],
        log_file=values["log-file"],
        kill_after=kill_after,
        confinement=values.get("confinement"),
        pid_file=values.get("pid-file"),
        go_fd=None if go_fd is None else int(go_fd),
        notify_socket=values.get("notify-socket"),
        command=arguments,
    )


def _usage_error(message: str) -> None:
    print(f"{USAGE}\nlocal_init: error: {message}", file=sys.stderr)
    sys.exit(2)


def own_confinement() -> confine.Confinement:
    """Without a confinement file: the caller's account, directory and environment."""
    uid, gid = os.getuid(), os.getgid()
    return confine.Confinement(
        uid=uid,
        gid=gid,
        groups=tuple(os.getgroups()),
        user=str(uid),
        working_dir=os.getcwd(),
        env=dict(os.environ),
        switch_user=False,
    )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    confinement = own_confinement() if args.confinement is None else confine.load(args.confinement)
    kind = Init if confinement.sandbox is None else SandboxedInit
    init = kind(args.command, args.kill_after, confinement)
    init.install_signal_handlers()  # a stop that comes early is kept for the command
    if args.pid_file is not None:
        detach(args.pid_file)
    if args.go_fd is not None and not wait_for_go(args.go_fd):
        return CANNOT_RUN  # never recorded: nothing runs, nothing is written
    redirect_output(args.log_file, confinement)
    become_subreaper()
    code = init.run()
    sys.stdout.flush()
    status: dict[str, object] = {"exit_code": code, "ended_at": time.time()}
    if isinstance(init, SandboxedInit) and init.reason:
        status["reason"] = init.reason
    write_atomically(args.status_file, json.dumps(status))
    if args.notify_socket is not None:
        notify_end(args.notify_socket, args.status_file)
    return code


def notify_end(socket_path: str, status_file: str) -> None:
    """Tell whoever listens on the socket (``local_ends``) that this worker ended: its pid
    (it exits right after) and its status file, in one datagram. Best effort: without a
    listener, the job manager's next poll finds the end."""
    import socket  # only here: most of the init's life needs no socket

    with contextlib.suppress(OSError), socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.sendto(f"{os.getpid()} {status_file}".encode(), str(socket_path))


if __name__ == "__main__":
    sys.exit(main())
