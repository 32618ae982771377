"""Container images on the local backend: a job's ``image`` as the root of its containers.

The site keeps its images in an image store (``TRAINYARD_LOCAL_IMAGE_STORE``): a directory
of OCI image layouts, one per repository, at the path the reference names. The image
``pytorch/pytorch:2.4`` is the tag ``2.4`` of the layout ``<store>/pytorch/pytorch``
(``latest`` when the reference names no tag); a reference with a digest,
``base@sha256:<hex>``, is the tag ``sha256-<hex>``; a registry's ``host:port`` is the
directory ``host_port`` (skopeo's ``oci:`` paths cannot hold a colon). With pulling on
(``TRAINYARD_LOCAL_IMAGE_PULL``), an image the store lacks is copied into it from its
registry with ``skopeo copy docker://<reference> oci:<layout>:<tag>``, as the host's
containers configuration says (/etc/containers/registries.conf, policy.json, auth).

Each image is unpacked with ``umoci unpack`` once per manifest digest, into the backend's
cache (``<state>/.images/<hex>``): under a lock per digest, into a directory of its own
that is renamed into place only once complete and checked, so that two deployments of one
image unpack it once and a half-unpacked image is never used. A container's root is an
overlay whose lower layer is the unpacked image (read-only, shared) and whose upper layer
is the container's own (in its bundle, gone with it): runc makes the mount points of the
job's paths there, never in the image.

Everything here runs as root, on root's directories (the store, the cache, the bundles);
a reference is checked part by part before it names a path, so that none leads out of the
store, and unpacking and removing follow no link of an image's.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

# What a reference may hold (the distribution's grammar; the registry's host first, which
# must start and end with a letter or digit: never "." or "..").
HOST = r"[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?(?::[0-9]+)?"
COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
REFERENCE = re.compile(
    rf"^(?P<repository>(?:{HOST}/)?{COMPONENT}(?:/{COMPONENT})*)"
    r"(?::(?P<tag>\w[\w.-]{0,127}))?(?:@sha256:(?P<digest>[a-f0-9]{64}))?$"
)
DIGEST = re.compile(r"^sha256:[a-f0-9]{64}$")
REF_NAME = "org.opencontainers.image.ref.name"
MANIFEST = "application/vnd.oci.image.manifest.v1+json"
UMOCI_TIMEOUT_SECONDS = 600.0
DEFAULT_CACHE_KEEP = 8  # unpacked images kept beyond those in use
# An unpacked image used this recently is kept whatever the limit: a deployment may be
# between finding it and mounting it.
RECENT_USE_SECONDS = 600.0
PULL_TIMEOUT_SECONDS = 900.0
# The container's init, put into every image's container (tini-static needs no library).
HOST_INIT = "/usr/bin/tini-static"
INIT_IN_CONTAINER = "/dev/init"


# The NVIDIA driver's user-space files an image's GPU worker gets from the host, as the
# NVIDIA container toolkit gives them: under /usr/local/nvidia, where CUDA images look
# (their LD_LIBRARY_PATH and PATH name it).
DRIVER_DIR = "/usr/local/nvidia"
DRIVER_LIBRARIES = (
    "libcuda.so", "libcudadebugger.so", "libnvidia-ml.so", "libnvidia-ptxjitcompiler.so",
    "libnvidia-nvvm.so", "libnvidia-gpucomp.so", "libnvidia-allocator.so", "libnvidia-cfg.so",
    "libnvidia-opencl.so",
)  # fmt: skip
DRIVER_PROGRAMS = ("nvidia-smi", "nvidia-debugdump")


class ImageMissing(Exception):
    """The site cannot provide the image (not in its store, or not to be pulled): the
    same job would fail again."""


class ImageBroken(OSError):
    """The image is there but could not be made a root (unpacking or mounting failed)."""


@dataclass(frozen=True, slots=True)
class ImageRoot:
    """An unpacked image: its manifest's digest, its root directory, its environment."""

    reference: str
    digest: str
    rootfs: Path
    env: tuple[str, ...]  # NAME=value, as the image's configuration sets them


@dataclass(frozen=True, slots=True)
class ImageStore:
    """Where a site keeps its images (``store_dir``), where a backend unpacks them
    (``cache_dir``), and whether images the store lacks are pulled from their registry."""

    store_dir: Path
    cache_dir: Path
    pull: bool = False
    cache_keep: int = DEFAULT_CACHE_KEEP

    def missing(self, reference: str) -> str:
        """Why the store cannot give ``reference`` ("" when it can, or may by pulling, or
        cannot be read from here: the deployment will tell)."""
        try:
            layout, tag = self.layout_of(reference)
        except ImageMissing as error:
            return str(error)
        if self.pull:
            return ""
        try:
            found = _manifest_digest(layout, tag)
        except PermissionError:
            return ""
        return "" if found else self._not_in_store(reference)

    def _not_in_store(self, reference: str) -> str:
        return (
            f"The image {reference} is not in this site's image store ({self.store_dir}), "
            "and images are not pulled here."
        )

    def layout_of(self, reference: str) -> tuple[Path, str]:
        """The layout and tag of ``reference`` in the store (ImageMissing: not a reference)."""
        matched = REFERENCE.match(reference)
        if matched is None:
            raise ImageMissing(f"{reference!r} is not an image reference.")
        parts = matched["repository"].split("/")
        parts[0] = parts[0].replace(":", "_")
        tag = f"sha256-{matched['digest']}" if matched["digest"] else matched["tag"] or "latest"
        return self.store_dir.joinpath(*parts), tag

    def root_of(self, reference: str) -> ImageRoot:
        """The unpacked root of ``reference``, pulled first where it is missing and pulling
        is on. ImageMissing when the site cannot give it; ImageBroken when unpacking fails."""
        layout, tag = self.layout_of(reference)
        digest = _manifest_digest(layout, tag)
        if not digest and not self.pull:
            raise ImageMissing(self._not_in_store(reference))
        if not digest:
            self._pull(reference, layout, tag)
            digest = _manifest_digest(layout, tag)
        if not digest:
            raise ImageMissing(f"The image {reference} was pulled, but has no manifest here.")
        unpacked = self._unpacked(layout, tag, digest)
        return ImageRoot(reference, digest, unpacked / "rootfs", _image_env(unpacked))

    def _pull(self, reference: str, layout: Path, tag: str) -> None:
        """Copy the image from its registry into the store, one copy of a layout at a time
        (the lock in the store: backends of several state directories may share it)."""
        self.store_dir.mkdir(mode=0o755, parents=True, exist_ok=True)
        with _locked(self.store_dir, f"pull-{layout.relative_to(self.store_dir)}"):
            if _manifest_digest(layout, tag):
                return  # another deployment pulled it meanwhile
            layout.parent.mkdir(parents=True, exist_ok=True)
            argv = ["skopeo", "copy", "--quiet", f"docker://{reference}", f"oci:{layout}:{tag}"]
            failed = _run(argv, PULL_TIMEOUT_SECONDS)
        if failed:
            raise ImageMissing(f"The image {reference} could not be pulled: {failed}")

    def _unpacked(self, layout: Path, tag: str, digest: str) -> Path:
        """The cache's directory of the manifest ``digest`` (tag ``tag`` of ``layout``),
        unpacked now unless it is there already, complete."""
        hexdigest = digest.removeprefix("sha256:")
        final = self.cache_dir / hexdigest
        if _used(final):  # only ever renamed into place whole
            return final
        with _locked(self.cache_dir, f"unpack-{hexdigest}"):
            if _used(final):
                return final
            partial = self.cache_dir / f".partial-{hexdigest}"
            if partial.exists():  # a crashed unpack's (rmtree follows no link)
                shutil.rmtree(partial)
            argv = ["umoci", "--log", "error", "unpack", "--image", f"{layout}:{tag}", str(partial)]
            failed = _run(argv, UMOCI_TIMEOUT_SECONDS)
            if failed:
                shutil.rmtree(partial, ignore_errors=True)
                raise ImageBroken(f"the image's layers could not be unpacked: {failed}")
            if _unpacked_digest(partial) != digest:  # the tag moved meanwhile
                shutil.rmtree(partial)
                raise ImageBroken(f"the tag {tag} changed while it was unpacked; try again")
            partial.rename(final)
        self.trim()
        return final

    def trim(self, now: float | None = None) -> list[str]:
        """Remove the least recently used unpacked images beyond ``cache_keep``, never one
        a container's root is made of nor one used in the last RECENT_USE_SECONDS; returns
        the digests (hex) removed. Run after each unpack: that is when the cache grows."""
        now = time.time() if now is None else now
        mounted = _mounted_lower_dirs()
        idle: list[tuple[float, Path]] = []
        for entry in self.cache_dir.iterdir() if self.cache_dir.is_dir() else ():
            if not re.fullmatch(r"[a-f0-9]{64}", entry.name) or entry.is_symlink():
                continue
            used = entry.stat().st_mtime
            if str(entry / "rootfs") not in mounted and now - used > RECENT_USE_SECONDS:
                idle.append((used, entry))
        idle.sort(reverse=True)  # the most recently used first: those are kept
        removed = []
        for _, entry in idle[self.cache_keep :]:
            with _locked(self.cache_dir, f"unpack-{entry.name}"):
                if str(entry / "rootfs") in _mounted_lower_dirs():
                    continue  # a deployment mounted it meanwhile
                trash = self.cache_dir / f".trash-{entry.name}"
                entry.rename(trash)  # gone for root_of at once; removed below
            shutil.rmtree(trash, ignore_errors=True)  # rmtree follows no link
            removed.append(entry.name)
        return removed


def image_store(
    store_dir: Path | str | None, cache_dir: Path, pull: bool, cache_keep: int = DEFAULT_CACHE_KEEP
) -> ImageStore | None:
    """The image store of a backend unpacking into ``cache_dir`` and keeping ``cache_keep``
    unpacked images beyond those in use (None without ``store_dir``). ValueError where
    this host lacks a tool it needs."""
    if not store_dir:
        return None
    tools = ["umoci", "mount"] + (["skopeo"] if pull else [])
    missing = [tool for tool in tools if shutil.which(tool) is None]
    missing += [] if os.path.exists(HOST_INIT) else [HOST_INIT]
    if missing:
        raise ValueError(f"images need {' and '.join(missing)}, not installed here.")
    if not Path(store_dir).is_absolute():
        raise ValueError(f"the image store must be an absolute path, not {store_dir!r}.")
    if cache_keep < 0:
        raise ValueError(f"the image cache cannot keep {cache_keep} images.")
    return ImageStore(Path(store_dir), cache_dir, pull, cache_keep)


def _used(unpacked: Path) -> bool:
    """Whether ``unpacked`` is there, marking it used now (the trim keeps it a while)."""
    try:
        os.utime(unpacked, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return unpacked.is_dir()


def _mounted_lower_dirs() -> set[str]:
    """The lower directories of the overlays mounted in this mount namespace."""
    lower: set[str] = set()
    with contextlib.suppress(OSError), open("/proc/self/mountinfo") as mounts:
        for line in mounts:
            if " - overlay " not in line:
                continue
            for option in line.rsplit(" ", 1)[-1].strip().split(","):
                if option.startswith("lowerdir="):
                    lower.update(option.removeprefix("lowerdir=").split(":"))
    return lower


def _manifest_digest(layout: Path, tag: str) -> str:
    """The digest of the manifest tagged ``tag`` in the layout ("" when there is none)."""
    try:
        with open(layout / "index.json", "rb") as index_file:
            index = json.load(index_file)
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError, ValueError):
        return ""
    for manifest in index.get("manifests", []) if isinstance(index, dict) else []:
        annotations = manifest.get("annotations") or {}
        if annotations.get(REF_NAME) == tag and manifest.get("mediaType") == MANIFEST:
            digest = str(manifest.get("digest", ""))
            return digest if DIGEST.match(digest) else ""  # it names a path in the cache
    return ""


def _unpacked_digest(unpacked: Path) -> str:
    """The manifest digest umoci says it unpacked ("" when it does not say)."""
    try:
        walk = json.loads((unpacked / "umoci.json").read_text())["from_descriptor_path"]
        digest: str = walk["descriptor_walk"][-1]["digest"]
        return digest
    except (OSError, ValueError, KeyError, IndexError, TypeError):
        return ""


def _image_env(unpacked: Path) -> tuple[str, ...]:
    """The image's environment (umoci writes it into the runtime configuration)."""
    try:
        config = json.loads((unpacked / "config.json").read_text())
        return tuple(str(item) for item in config["process"]["env"])
    except (OSError, ValueError, KeyError, TypeError):
        return ()


def environment(
    image: ImageRoot, worker_env: dict[str, str], job_env: dict[str, str]
) -> dict[str, str]:
    """A worker's environment in ``image``: the image's, then the backend's (``worker_env``,
    which holds the job's own); the image's PATH wins over the host's unless the job
    gives one."""
    image_env = dict(item.split("=", 1) for item in image.env if "=" in item)
    env = image_env | worker_env
    if "PATH" in image_env and "PATH" not in job_env:
        env["PATH"] = image_env["PATH"]
    return env


def driver_files(source: str) -> tuple[tuple[str, str], ...]:
    """The host's NVIDIA driver files an image's GPU worker gets, as (host file, path in
    the container): from the linker's cache and PATH (``source`` "auto"), from one
    directory (its ``lib*.so*`` and programs), or none ("" or "none"). Read once, when
    the backend starts: a driver upgraded since needs the backend restarted."""
    if source in ("", "none"):
        return ()
    if source == "auto":
        libraries = _linker_cache()
        programs = [shutil.which(name) for name in DRIVER_PROGRAMS]
    else:
        directory = Path(source)
        libraries = {p.name: str(p) for p in sorted(directory.glob("lib*.so*")) if p.is_file()}
        programs = [str(directory / name) for name in DRIVER_PROGRAMS]
    files = [
        (os.path.realpath(path), f"{DRIVER_DIR}/lib64/{name}")
        for name, path in libraries.items()
        if name.startswith(DRIVER_LIBRARIES)
    ]
    files += [
        (os.path.realpath(path), f"{DRIVER_DIR}/bin/{os.path.basename(path)}")
        for path in programs
        if path and os.path.isfile(path)
    ]
    return tuple(files)


def _linker_cache() -> dict[str, str]:
    """The 64-bit libraries the host's linker knows, by name (``ldconfig -p``)."""
    try:
        listed = subprocess.run(
            ["ldconfig", "-p"], capture_output=True, text=True, timeout=30, check=False
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    found: dict[str, str] = {}
    for line in listed.splitlines():
        name, _, path = line.strip().partition(" => ")
        if "64" in name and path:
            found.setdefault(name.split(" ", 1)[0], path)
    return found


def with_driver_paths(env: dict[str, str]) -> dict[str, str]:
    """``env`` with the driver's directories on LD_LIBRARY_PATH and PATH (once)."""
    env = dict(env)
    for name, directory in (
        ("LD_LIBRARY_PATH", f"{DRIVER_DIR}/lib64"),
        ("PATH", f"{DRIVER_DIR}/bin"),
    ):
        parts = [part for part in env.get(name, "").split(":") if part]
        if directory not in parts:
            env[name] = ":".join([*parts, directory])
    return env


def mount_root(image_rootfs: Path, bundle: Path) -> None:
    """Mount the container's root at ``<bundle>/rootfs``: an overlay of the image
    (read-only, below) and the container's own upper layer (in the bundle)."""
    rootfs, upper, work = bundle / "rootfs", bundle / "image-upper", bundle / "image-work"
    if os.path.ismount(rootfs):
        return
    for directory in (rootfs, upper, work):
        directory.mkdir(exist_ok=True)
    upper.chmod(0o755)  # the container's "/": every account passes through it
    paths = (image_rootfs, upper, work)
    if any(char in str(path) for path in paths for char in ",:\\"):
        raise ImageBroken(f"an overlay cannot be made of {bundle} (',', ':' or '\\')")
    options = f"lowerdir={image_rootfs},upperdir={upper},workdir={work}"
    failed = _run(["mount", "-t", "overlay", "overlay", "-o", options, str(rootfs)], 30.0)
    if failed:
        raise ImageBroken(f"the container's root could not be mounted: {failed}")


def release_roots(job_dir: Path) -> None:
    """Unmount the image roots of every bundle in ``job_dir`` (before it is removed)."""
    for rootfs in job_dir.glob("*.bundle/rootfs"):
        if os.path.ismount(rootfs):
            _run(["umount", "--lazy", str(rootfs)], 30.0)


@contextlib.contextmanager
def _locked(directory: Path, name: str) -> Iterator[None]:
    """An exclusive lock, across processes, named ``name`` in ``directory`` (root's)."""
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    safe_name = re.sub(r"[^A-Za-z0-9_.-]", "+", name)
    descriptor = os.open(
        directory / f".lock-{safe_name}", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600
    )
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX)
        yield
    finally:
        os.close(descriptor)


def _run(argv: list[str], timeout: float) -> str:
    """Run a tool; "" when it succeeded, else why not (its last line of errors)."""
    try:
        done = subprocess.run(
            argv, stdin=subprocess.DEVNULL, capture_output=True, text=True,
            timeout=timeout, check=False,
        )  # fmt: skip
    except FileNotFoundError:
        return f"{argv[0]} is not installed"
    except subprocess.TimeoutExpired:
        return f"{argv[0]} took more than {timeout:.0f} s"
    if done.returncode == 0:
        return ""
    lines = [line.strip() for line in done.stderr.splitlines() if line.strip()]
    return (lines[-1] if lines else f"{argv[0]} exited with {done.returncode}")[:300]
