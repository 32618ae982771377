"""The container a local-backend worker runs in: an OCI bundle for ``runc``.

With the sandbox on (``TRAINYARD_LOCAL_SANDBOX=runc``, or ``auto``, the default, where the
host can run it), each worker is a runc container whose bundle this module writes: the
worker's command, under ``tini`` (the container's pid 1, which forwards stops to it and
reaps what it leaves), as the owner's uid, gid and groups, with no capabilities and
``no_new_privs``, in its working directory, with the job's environment. Its root is an
empty directory in which only what the job may use is mounted: the host's system
(``/usr``, ``/etc``, ``/opt``, the portal's Python) read-only, and read-write the working
directory, the log directory, the owner's home and the
directories the job declares; ``/tmp`` and ``/dev/shm`` are tmpfs of its own (counted in
its memory cgroup), ``/dev`` holds the usual few devices and, on a host with GPUs, only
the worker's own ``/dev/nvidiaN`` (wherever the host keeps them). It has namespaces of its
own: pid (its ``ps`` shows its processes alone), mount, ipc, uts, and the job's network
namespace (``sandbox_net``). Its limits are cgroups (v1 here, as runc finds them): memory
with swap, CPU quota, pids, devices.
A worker of a job with an image has that image as its root instead of the host's system
(an overlay ``images.mount_root`` makes in the bundle), and the host's static tini as its
init.
runc's state and the bundles of containers on the host's system are kept in the backend's
runtime directory on a tmpfs (``runtime_dir``); an image's bundle stays in its job's
directory, on disk, its upper layer with it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import stat
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jobmanager.backends import runc
from jobmanager.backends.images import HOST_INIT, INIT_IN_CONTAINER, mount_root
from jobmanager.backends.local_host import CPU_PERIOD_US, MIB

MODES = ("runc", "auto", "none")
TINI = "/usr/bin/tini"
# The host's system, read-only in every sandbox (those a host lacks are left out).
SYSTEM_PATHS = ("/usr", "/etc", "/opt", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
GPU_CONTROL_DEVICES = ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset")
MASKED_PATHS = (
    "/proc/acpi", "/proc/asound", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
    "/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/proc/scsi",
    "/sys/firmware",
)  # fmt: skip
READONLY_PATHS = (
    "/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger",
)  # fmt: skip
NAMESPACES = ("pid", "mount", "ipc", "uts", "network")
# runc enters ``process.cwd`` as root, before it drops to the owner: the working directory
# is entered by the owner, so that the kernel decides whether the owner may.
ENTER = (
    'cd -- "$1" 2>/dev/null || { [ -d "$1" ] && why="Permission denied" ||'
    ' why="No such directory, or not reachable"; echo "trainyard: $(id -un) cannot enter'
    ' the working directory $1: $why" >&2; exit 127; }; shift; exec "$@"'
)
DEFAULT_PIDS_LIMIT = 4096
CGROUPS = Path("/sys/fs/cgroup")
V1_CONTROLLERS = ("memory", "cpu", "pids", "devices")
MEMSW = Path("/sys/fs/cgroup/memory/memory.memsw.limit_in_bytes")
# Where a backend's runtime files go (runc's state, the bundles of containers on the host's
# system): the first of these that is a tmpfs, as runc's own default (/run/runc) is. A file
# made on a journalled disk costs its maker CPU in the kernel (0.4-0.5 ms each on this
# host's ext4, 5 us on tmpfs), and runc makes a dozen or two of them for every container.
RUNTIME_PARENTS = ("/run", "/dev/shm")
RUNTIME_NAME_PATTERN = "trainyard-" + "[0-9a-f]" * 10  # ``cgroup_parent``'s names
OWNER = "state_dir"  # in a runtime directory: the state directory of its backend


@dataclass(frozen=True, slots=True)
class Sandbox:
    """What every sandbox of one backend shares: where runc keeps its state, the cgroup
    parent of its containers, the read-only paths beside the system's, the pids limit."""

    runtime_root: Path
    cgroup_parent: str
    readonly_paths: tuple[str, ...] = ()
    pids_limit: int = DEFAULT_PIDS_LIMIT
    # Where the bundles of containers on the host's system go (None: in their job's
    # directory); those of an image's stay there (the image's upper layer is on disk).
    bundle_dir: Path | None = None
    # The backend's state directory, recorded in its runtime directory (``OWNER``).
    state_dir: Path | None = None

    def cgroup_path(self, container: str) -> str:
        return f"/{self.cgroup_parent}/{container}"

    def bundle_path(self, container: str, job_dir: Path, prefix: str) -> Path:
        """The bundle of ``container``, a worker of a job on the host's system."""
        if self.bundle_dir is None:
            return job_dir / f"{prefix}.bundle"
        return self.bundle_dir / container

    def describe(self) -> str:
        """What the sandbox isolates, in words, for the job page."""
        swap = "+swap" if MEMSW.exists() else ""
        return (
            f"runc container per worker: own pid, mount, ipc, uts, network namespaces; "
            f"system read-only, private /tmp, /dev/shm; cgroup v1: memory{swap} (shm "
            f"counted), CPU quota, {self.pids_limit} pids, devices (own GPUs only)"
        )


@dataclass(frozen=True, slots=True)
class Worker:
    """One worker's container: its command, account, place, limits and devices."""

    container: str
    argv: list[str]
    env: dict[str, str]
    cwd: str
    uid: int
    gid: int
    groups: tuple[int, ...]
    hostname: str
    writable_paths: tuple[str, ...]
    readonly_paths: tuple[str, ...]
    millicpus: int
    memory_mib: int
    netns: str | None = None
    gpu_devices: tuple[str, ...] = field(default=())
    image_root: str = ""  # the job's unpacked image (``images``); "": the host's system
    # The host's GPU driver files put into an image's container: (host file, its path there).
    driver_files: tuple[tuple[str, str], ...] = ()


def available() -> str:
    """Why the sandbox cannot be used here ("" when it can): it needs runc, tini, root and
    cgroups it may write."""
    missing = [name for name in ("runc",) if shutil.which(name) is None]
    missing += [] if os.path.exists(TINI) else ["tini"]
    if missing:
        return f"{' and '.join(missing)} not installed"
    if os.geteuid() != 0:
        return "the backend does not run as root"
    if not _cgroups_writable():
        return f"the cgroups under {CGROUPS} cannot be written here"
    return ""


def _cgroups_writable() -> bool:
    """Whether runc can make containers' cgroups: the v2 hierarchy, or v1's memory, cpu,
    pids and devices controllers, writable."""
    if (CGROUPS / "cgroup.controllers").exists():
        return os.access(CGROUPS, os.W_OK)
    return all(os.access(CGROUPS / name, os.W_OK) for name in V1_CONTROLLERS)


def write_bundle(directory: Path, sandbox: Sandbox, worker: Worker) -> None:
    """The bundle (``config.json`` and an empty ``rootfs``) of ``worker``'s container, in
    ``directory`` (root's alone: the config holds the job's environment)."""
    if sandbox.bundle_dir is not None and directory.parent == sandbox.bundle_dir:
        make_runtime_dir(sandbox.bundle_dir.parent, sandbox.state_dir)
    directory.mkdir(mode=0o700, exist_ok=True)
    rootfs = directory / "rootfs"
    rootfs.mkdir(exist_ok=True)
    rootfs.chmod(0o755)  # the container's "/": every account passes through it
    if worker.image_root:
        mount_root(Path(worker.image_root), directory)
    for path in () if worker.image_root else SYSTEM_PATHS:  # a merged /usr: /bin a link
        if os.path.islink(path) and not (rootfs / path.lstrip("/")).is_symlink():
            (rootfs / path.lstrip("/")).symlink_to(os.readlink(path))
    config = bundle_config(sandbox, worker)
    descriptor = os.open(directory / "config.json", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as file:
        file.write(json.dumps(config))  # C's encoder: json.dump to a file is Python's


def bundle_config(sandbox: Sandbox, worker: Worker) -> dict[str, Any]:
    """The OCI runtime configuration of ``worker``'s container."""
    namespaces: list[dict[str, str]] = [{"type": kind} for kind in NAMESPACES]
    if worker.netns:
        namespaces[-1]["path"] = worker.netns
    devices = [_device(path) for path in worker.gpu_devices if os.path.exists(path)]
    init = INIT_IN_CONTAINER if worker.image_root else TINI
    argv = [init, "-s", "-g", "--", "/bin/sh", "-c", ENTER, "sh", worker.cwd, *worker.argv]
    account = (worker.uid, worker.gid, list(worker.groups))
    return {
        "ociVersion": "1.0.2",
        "process": runc.process(argv, worker.env, "/", *account),
        "root": {"path": "rootfs", "readonly": True},
        "hostname": worker.hostname,
        "mounts": _mounts(sandbox, worker),
        "linux": {
            "namespaces": namespaces,
            "cgroupsPath": sandbox.cgroup_path(worker.container),
            "resources": _resources(sandbox, worker, devices),
            "devices": devices,
            "maskedPaths": list(MASKED_PATHS),
            "readonlyPaths": list(READONLY_PATHS),
        },
    }


def _mounts(sandbox: Sandbox, worker: Worker) -> list[dict[str, Any]]:
    kernel: list[dict[str, Any]] = [
        {"destination": "/proc", "type": "proc", "source": "proc"},
        {"destination": "/dev", "type": "tmpfs", "source": "tmpfs",
         "options": ["nosuid", "strictatime", "mode=755", "size=65536k"]},
        {"destination": "/dev/pts", "type": "devpts", "source": "devpts",
         "options": ["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"]},
        {"destination": "/dev/shm", "type": "tmpfs", "source": "shm",
         "options": ["nosuid", "noexec", "nodev", "mode=1777"]},
        {"destination": "/dev/mqueue", "type": "mqueue", "source": "mqueue",
         "options": ["nosuid", "noexec", "nodev"]},
        {"destination": "/sys", "type": "sysfs", "source": "sysfs",
         "options": ["nosuid", "noexec", "nodev", "ro"]},
        {"destination": "/tmp", "type": "tmpfs", "source": "tmpfs",
         "options": ["nosuid", "nodev", "mode=1777"]},
    ]  # fmt: skip
    shared = (*SYSTEM_PATHS, *sandbox.readonly_paths, *worker.readonly_paths)
    if worker.image_root:  # the image's system, not the host's (nor the portal's Python)
        portal = (*SYSTEM_PATHS, sys.prefix, sys.base_prefix)
        shared = tuple(path for path in shared if path not in portal)
        kernel += _image_files(worker.driver_files)
    readonly = [p for p in shared if _is_directory(p)]
    writable = [p for p in worker.writable_paths if _is_directory(p)]
    binds = {path: "ro" for path in readonly} | {path: "rw" for path in writable}
    # A parent before what lies under it, so that nothing is hidden by a later mount.
    ordered = sorted(binds, key=lambda path: (path.rstrip("/").count("/"), path))
    return kernel + [
        {"destination": path, "type": "bind", "source": path,
         "options": ["rbind", binds[path], "nosuid", "nodev"]}
        for path in ordered
    ]  # fmt: skip


def _image_files(driver_files: tuple[tuple[str, str], ...]) -> list[dict[str, Any]]:
    """What a container of an image gets of the host's: its init, how to resolve names,
    and the GPU driver's files where it has GPUs (in directories of their own that every
    account may list, whatever the image holds there)."""
    files = [
        (HOST_INIT, INIT_IN_CONTAINER),
        ("/etc/resolv.conf", "/etc/resolv.conf"),
        *driver_files,
    ]
    directories = sorted({os.path.dirname(destination) for _, destination in driver_files})
    return [
        {"destination": directory, "type": "tmpfs", "source": "tmpfs",
         "options": ["nosuid", "nodev", "mode=755", "size=64k"]}
        for directory in directories
    ] + [
        {"destination": destination, "type": "bind", "source": source,
         "options": ["bind", "ro", "nosuid", "nodev"]}
        for source, destination in files
        if os.path.isfile(source)
    ]  # fmt: skip


def _is_directory(path: str) -> bool:
    return bool(path) and os.path.isdir(path) and not os.path.islink(path)


def _resources(sandbox: Sandbox, worker: Worker, devices: list[dict[str, Any]]) -> dict[str, Any]:
    resources: dict[str, Any] = {
        "devices": [{"allow": False, "access": "rwm"}]
        + [
            {"allow": True, "type": "c", "major": d["major"], "minor": d["minor"], "access": "rwm"}
            for d in devices
        ],
        "pids": {"limit": sandbox.pids_limit},
    }
    if worker.memory_mib > 0:
        limit = worker.memory_mib * MIB
        resources["memory"] = {"limit": limit} | ({"swap": limit} if MEMSW.exists() else {})
    if worker.millicpus > 0:
        quota = max(1000, worker.millicpus * CPU_PERIOD_US // 1000)
        resources["cpu"] = {"quota": quota, "period": CPU_PERIOD_US}
    return resources


def _device(path: str) -> dict[str, Any]:
    """The device file ``path`` of the host, made in the container at ``/dev/<its name>``
    (where CUDA looks, whatever directory the host keeps it in)."""
    info = os.stat(path)
    return {
        "path": f"/dev/{os.path.basename(path)}",
        "type": "c",
        "major": os.major(info.st_rdev),
        "minor": os.minor(info.st_rdev),
        "fileMode": 0o666,
        "uid": 0,
        "gid": 0,
    }


def gpu_device_paths(device_dir: Path | None, gpus: list[int]) -> tuple[str, ...]:
    """The device files a worker with ``gpus`` needs: its own GPUs' and the control ones."""
    if device_dir is None:
        return ()
    names = [f"nvidia{gpu}" for gpu in gpus] + (list(GPU_CONTROL_DEVICES) if gpus else [])
    return tuple(str(device_dir / name) for name in names)


def for_backend(
    mode: str, state_dir: Path, readonly_paths: tuple[str, ...], pids_limit: int
) -> Sandbox | None:
    """The sandbox of a backend keeping its state in ``state_dir``: with ``mode`` "runc",
    one (ValueError, saying why, where this host cannot have it); "auto", one where the
    host can; "none", none."""
    if mode not in MODES:
        raise ValueError(f"{mode!r} is not a sandbox: choose runc, auto or none.")
    if mode == "none":
        return None
    missing = available()
    if missing:
        if mode == "auto":
            return None
        raise ValueError(f"the runc sandbox cannot run here: {missing}.")
    if pids_limit < 1:
        raise ValueError(f"the sandbox's pids limit must be positive, not {pids_limit}.")
    runtime = runtime_dir(state_dir)
    with contextlib.suppress(FileNotFoundError):  # made by the first bundle
        _check_runtime_dir(runtime)
    return Sandbox(
        runtime_root=runtime / "runc",
        cgroup_parent=cgroup_parent(state_dir),
        readonly_paths=tuple(dict.fromkeys((sys.prefix, sys.base_prefix, *readonly_paths))),
        pids_limit=pids_limit,
        bundle_dir=runtime / "bundles",
        state_dir=state_dir,
    )


def runtime_dir(state_dir: Path) -> Path:
    """The runtime directory of the backend keeping its state in ``state_dir``: one of its
    own on a tmpfs (``RUNTIME_PARENTS``), named as its cgroup parent; ``.runtime`` in the
    state directory where the host has no tmpfs there. Emptied by a reboot, as every
    container is."""
    for parent in RUNTIME_PARENTS:
        if _is_tmpfs(parent):
            return Path(parent) / cgroup_parent(state_dir)
    return state_dir / ".runtime"


def make_runtime_dir(runtime: Path, state_dir: Path | None = None) -> None:
    """The backend's runtime directory ``runtime`` (``runtime_dir``) with its ``runc`` and
    ``bundles``, made root's alone where they are not there (again after a sweep of empty
    directories), and the backend's ``state_dir`` recorded in it (``OWNER``); ValueError
    where something else has its name (a tmpfs such as /dev/shm is writable by all)."""
    with contextlib.suppress(FileExistsError):
        os.mkdir(runtime, 0o700)
    _check_runtime_dir(runtime)
    if state_dir is not None and not (runtime / OWNER).exists():
        (runtime / OWNER).write_text(str(state_dir.resolve()))
    for name in ("runc", "bundles"):
        with contextlib.suppress(FileExistsError):
            os.mkdir(runtime / name, 0o700)


def _check_runtime_dir(runtime: Path) -> None:
    info = os.lstat(runtime)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid() or info.st_mode & 0o077:
        raise ValueError(
            f"the sandbox's runtime directory {runtime} is not this account's own directory "
            "(0700): remove it, or find who made it."
        )


def remove_runtime_dir(state_dir: Path) -> None:
    """The runtime directory of a backend that is done (tests, benchmarks): what its
    containers left there."""
    runtime = runtime_dir(state_dir)
    with contextlib.suppress(OSError):
        if stat.S_ISDIR(os.lstat(runtime).st_mode):
            shutil.rmtree(runtime, ignore_errors=True)


def remove_abandoned_runtime_dirs() -> list[Path]:
    """The runtime directories whose backend's state directory is gone (a test's or a
    benchmark's, ended or killed), removed with what their containers left; those in use,
    and those that record no state directory, are left. Returns those removed."""
    removed = []
    for parent in RUNTIME_PARENTS:
        for runtime in Path(parent).glob(RUNTIME_NAME_PATTERN):
            try:
                _check_runtime_dir(runtime)
                owner = Path((runtime / OWNER).read_text())
            except (OSError, ValueError):
                continue
            if not owner.exists():
                shutil.rmtree(runtime, ignore_errors=True)
                removed.append(runtime)
    return removed


def _is_tmpfs(path: str) -> bool:
    """Whether ``path`` is where a tmpfs is mounted (the last mount there, which is seen)."""
    found = False
    try:
        with open("/proc/self/mountinfo") as mounts:
            for line in mounts:
                fields = line.split(" - ", 1)
                mount_point = fields[0].split(" ")[4]
                if mount_point == path and len(fields) == 2:
                    found = fields[1].split(" ", 1)[0] == "tmpfs"
    except (OSError, IndexError):
        return False
    return found


def cgroup_parent(state_dir: Path) -> str:
    """The cgroup parent of a backend's containers: one per state directory, so that two
    backends on a host never share one."""
    return f"trainyard-{hashlib.sha256(str(state_dir.resolve()).encode()).hexdigest()[:10]}"


def remove_cgroup_parent(state_dir: Path) -> None:
    """The cgroup parent of the backend in ``state_dir``, in every hierarchy, with the
    containers' cgroups left under it; only what holds no process (the kernel refuses
    the rest)."""
    for parent in CGROUPS.glob(f"*/{cgroup_parent(state_dir)}"):
        remove_empty_cgroups(parent)


def remove_empty_cgroups(top: Path) -> None:
    """``top`` and the cgroups under it, deepest first, each where it holds no process."""
    for directory, _, _ in sorted(os.walk(top), key=lambda entry: -entry[0].count("/")):
        with contextlib.suppress(OSError):
            os.rmdir(directory)


def container_name(job_id: str, attempt: int, rank: int) -> str:
    return f"{job_id}-a{attempt}-w{rank}"


def reference(sandbox: Sandbox, container: str, bundle: Path) -> dict[str, str]:
    """What the worker's init and sessions need to find its container (a confinement's
    ``sandbox``)."""
    return {
        "root": str(sandbox.runtime_root),
        "container": container,
        "bundle": str(bundle),
        "cgroup": sandbox.cgroup_path(container),
    }


def remove_containers(references: list[dict[str, str]]) -> None:
    """Kill and delete the containers (their every process, their cgroups), and forget
    any that runc was killed while making (which would refuse a new one of the same id);
    the bundles in the runtime directory go with them (those in a job's directory, with
    the directory)."""
    for ref in references:
        if runc.exists(ref["root"], ref["container"]):
            runc.delete(ref["root"], ref["container"])
        else:
            runc.forget_unmade(ref["root"], ref["container"])
        runc.remove_cgroups(ref["cgroup"])
        if os.path.basename(ref["bundle"]) == ref["container"]:  # ``bundle_path``'s
            shutil.rmtree(ref["bundle"], ignore_errors=True)  # runc's mount points, config
