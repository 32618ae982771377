"""What this host offers the local backend: its nodes, cgroup v2 limits, GPU devices.

The nodes are the GPUs NVML finds (one node named after the host), or an inventory
declared by configuration (``name:gpu_type:gpus[:cpus:memoryMiB],...``), all of it
running on this host, so that scheduling works end to end on a machine without GPUs.
Limits are one cgroup v2 scope per worker in a delegated ``trainyard.slice``, where the
host allows it. Where the host has the GPUs' device files, a worker's own are its
owner's alone while it runs.
"""

from __future__ import annotations

import contextlib
import os
import re
from decimal import Decimal, InvalidOperation
from pathlib import Path

import psutil

from jobmanager.backends.base import BackendNode

DECLARED_LABEL = "trainyard.io/declared"
DEFAULT_CGROUP_ROOT = Path("/sys/fs/cgroup/trainyard.slice")
DEFAULT_DEVICE_DIR = Path("/dev")
MIB = 1024 * 1024
CPU_PERIOD_US = 100_000
_NODE_NAME_RE = re.compile(r"[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?")
_GPU_VENDOR_WORDS = {"NVIDIA", "Tesla", "GeForce", "Quadro"}
_DEVICE = re.compile(r"nvidia([0-9]+)")


# --- nodes ------------------------------------------------------------------------------


def parse_declared_nodes(text: str, host_millicpus: int, host_memory: int) -> list[BackendNode]:
    """Nodes from ``name:gpu_type:gpus[:cpus:memoryMiB],...``; a node that does not give
    its CPUs and memory gets an even share of the host's. Raises ValueError, saying which
    entry is wrong and why."""
    entries = [entry.strip() for entry in text.split(",") if entry.strip()]
    if not entries:
        raise ValueError("The declared inventory names no node.")
    nodes: list[BackendNode] = []
    for entry in entries:
        fields = [field.strip() for field in entry.split(":")]
        if len(fields) not in (3, 5):
            raise ValueError(
                f"Declared node {entry!r}: write name:gpu_type:gpus or "
                "name:gpu_type:gpus:cpus:memoryMiB."
            )
        name, gpu_type, gpus = fields[:3]
        if not _NODE_NAME_RE.fullmatch(name):
            raise ValueError(f"Declared node {entry!r}: {name!r} is not a node name.")
        if any(node.name == name for node in nodes):
            raise ValueError(f"Declared node {name!r} is declared twice.")
        if not gpu_type:
            raise ValueError(f"Declared node {entry!r}: give the GPU type.")
        millicpus, memory = host_millicpus // len(entries), host_memory // len(entries)
        if len(fields) == 5:
            millicpus = _positive(fields[3], entry, "cpus", Decimal(1000))
            memory = _positive(fields[4], entry, "memory (MiB)", Decimal(1))
        nodes.append(
            BackendNode(
                name=name,
                gpu_type=gpu_type,
                gpus=_count(gpus, entry),
                millicpus=millicpus,
                memory=memory,
                labels={DECLARED_LABEL: "true"},
                declared=True,
            )
        )
    return nodes


def _count(text: str, entry: str) -> int:
    if not text.isdigit():
        raise ValueError(f"Declared node {entry!r}: GPUs must be a whole number, not {text!r}.")
    return int(text)


def _positive(text: str, entry: str, what: str, unit: Decimal) -> int:
    try:
        value = Decimal(text) * unit
    except InvalidOperation:
        value = Decimal(0)
    if not value.is_finite() or value <= 0 or value != value.to_integral_value():
        raise ValueError(
            f"Declared node {entry!r}: {what} must be a positive number, not {text!r}."
        )
    return int(value)


def discover_gpus() -> list[str]:
    """The names of this host's GPUs in NVML order; none where NVML is missing or fails."""
    try:
        import pynvml
    except ImportError:
        return []
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return []
    try:
        names = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            name = pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(index))
            names.append(name.decode() if isinstance(name, bytes) else name)
        return names
    except pynvml.NVMLError:
        return []
    finally:
        with contextlib.suppress(pynvml.NVMLError):
            pynvml.nvmlShutdown()


def gpu_type_of(device_name: str) -> str:
    """The GPU type a device name stands for: "NVIDIA A100-SXM4-80GB" is "A100", "NVIDIA
    GeForce RTX 4090" is "RTX-4090"."""
    words = [w for w in re.split(r"[\s-]+", device_name) if w and w not in _GPU_VENDOR_WORDS]
    if not words:
        return device_name.strip() or "gpu"
    if any(c.isdigit() for c in words[0]) or len(words) == 1:
        return words[0]
    return f"{words[0]}-{words[1]}"


def host_resources() -> tuple[int, int]:
    """This host's CPUs (in millicpus) and memory (MiB)."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return (cpus or 1) * 1000, psutil.virtual_memory().total // MIB


# --- cgroup v2 limits -------------------------------------------------------------------


class Cgroups:
    """One cgroup v2 scope per worker under a delegated root (``<name>.scope`` in
    ``trainyard.slice``), with cpu.max and memory.max; or, where the host does not allow
    that, nothing, with the reason in ``reason``."""

    CONTROLLERS = ("cpu", "memory")

    def __init__(self, root: Path | None) -> None:
        self.root = root
        self.reason = ""
        self.enabled = self._set_up()

    def _set_up(self) -> bool:
        if self.root is None:
            self.reason = "limits are switched off"
            return False
        if not (self.root.parent / "cgroup.controllers").is_file():
            self.reason = f"{self.root.parent} is not a cgroup v2 hierarchy"
            return False
        try:
            # What the root has, or, before it exists, what its parent hands its children.
            offered = self.root / "cgroup.controllers"
            if not self.root.exists():
                offered = self.root.parent / "cgroup.subtree_control"
            missing = [c for c in self.CONTROLLERS if c not in offered.read_text().split()]
            if missing:
                self.reason = f"{self.root} is not delegated the {', '.join(missing)} controller"
                return False
            self.root.mkdir(exist_ok=True)
            enabled = (self.root / "cgroup.subtree_control").read_text().split()
            if any(c not in enabled for c in self.CONTROLLERS):
                wanted = " ".join(f"+{c}" for c in self.CONTROLLERS)
                (self.root / "cgroup.subtree_control").write_text(wanted)
        except OSError as error:
            self.reason = f"cannot set up {self.root}: {error}"
            return False
        return True

    def create(self, name: str, millicpus: int, memory: int) -> Path | None:
        if not self.enabled or self.root is None:  # enabled only with a root
            return None
        directory = self.root / (re.sub(r"[^A-Za-z0-9_-]", "_", name) + ".scope")
        directory.mkdir(exist_ok=True)
        # The kernel refuses a quota under 1 ms per period.
        quota = str(max(1000, millicpus * CPU_PERIOD_US // 1000)) if millicpus > 0 else "max"
        (directory / "cpu.max").write_text(f"{quota} {CPU_PERIOD_US}")
        (directory / "memory.max").write_text(str(memory * MIB) if memory > 0 else "max")
        if (directory / "memory.swap.max").exists():
            (directory / "memory.swap.max").write_text("0")  # the limit is not a swap quota
        return directory

    @staticmethod
    def kill(directory: str | None) -> None:
        if directory and (Path(directory) / "cgroup.kill").exists():
            with contextlib.suppress(OSError):
                (Path(directory) / "cgroup.kill").write_text("1")

    @staticmethod
    def delete(directory: str | None) -> None:
        if directory:
            with contextlib.suppress(OSError):
                Path(directory).rmdir()  # only once empty; a stray keeps it, harmlessly


# --- GPU device files ---------------------------------------------------------------------


class GpuDevices:
    """``/dev/nvidiaN`` of the GPUs a worker holds, made its owner's alone (owner, mode
    0600) while it runs and root's alone once it is removed, so that a job opens no GPU
    but its own whatever CUDA_VISIBLE_DEVICES says. Only where the files exist and this
    process may change them (root); the control devices (nvidiactl, nvidia-uvm) stay as
    they are, since every GPU user needs them."""

    def __init__(self, directory: Path | None) -> None:
        self.directory = directory

    def paths(self, gpus: list[int]) -> list[Path]:
        if self.directory is None or os.geteuid() != 0:
            return []
        found = [self.directory / f"nvidia{gpu}" for gpu in gpus]
        return [path for path in found if path.exists() and not path.is_symlink()]

    def assign(self, gpus: list[int], uid: int, gid: int) -> None:
        for path in self.paths(gpus):
            os.chown(path, uid, gid, follow_symlinks=False)
            os.chmod(path, 0o600)

    def present(self) -> list[int]:
        """The GPUs whose device files this host has (none unless this process is root)."""
        if self.directory is None or os.geteuid() != 0:
            return []
        names = (path.name for path in self.directory.glob("nvidia*"))
        return sorted(int(match[1]) for name in names if (match := _DEVICE.fullmatch(name)))

    def release(self, gpus: list[int]) -> None:
        for path in self.paths(gpus):
            with contextlib.suppress(OSError):
                os.chown(path, 0, 0, follow_symlinks=False)
                os.chmod(path, 0o600)
