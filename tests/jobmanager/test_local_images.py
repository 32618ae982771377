"""A job's image on the local backend: the real runc sandbox, a real OCI image built here
with umoci from Debian's static busybox (no registry, no network), real overlay mounts.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from jobmanager.backends import BackendNode, LaunchRefused, WorkerState, images
from jobmanager.backends.images import MANIFEST, REF_NAME, ImageBroken, ImageStore, mount_root
from jobmanager.backends.local import LocalBackend
from tests.jobmanager.test_local_backend import launch, logged
from tests.jobmanager.test_local_sandbox import in_session, run_to_end, sandboxed_backend
from tests.polling import wait_until
from tests.servers import free_port

IMAGE = "trainyard-images-test/busybox:1"
MARKER = "ID=trainyard-images-test"
REGISTRIES_CONF_D = Path("/etc/containers/registries.conf.d")
APPLETS = ("sh", "cat", "id", "ls", "echo", "touch", "env", "sleep", "pwd", "stat")


def build_image(store: Path, reference: str = IMAGE) -> Path:
    """An OCI layout in ``store`` holding ``reference``: busybox as /bin, an os-release
    of its own, PATH=/bin; returns the layout."""
    if shutil.which("umoci") is None or not Path("/bin/busybox").exists():
        pytest.skip("images need umoci and busybox-static (deploy/install-system-packages.sh)")
    repository, tag = reference.rsplit(":", 1)
    layout = store / repository
    layout.parent.mkdir(parents=True, exist_ok=True)
    bundle = store.parent / f"bundle-{tag}"
    umoci = ["umoci", "--log", "error"]
    if not (layout / "index.json").exists():  # a layout holds each tag built into it
        run([*umoci, "init", "--layout", str(layout)])
    run([*umoci, "new", "--image", f"{layout}:{tag}"])
    run([*umoci, "unpack", "--image", f"{layout}:{tag}", str(bundle)])
    rootfs = bundle / "rootfs"
    (rootfs / "bin").mkdir()
    (rootfs / "etc").mkdir()
    shutil.copy2("/bin/busybox", rootfs / "bin" / "busybox")
    for applet in APPLETS:
        (rootfs / "bin" / applet).symlink_to("busybox")
    (rootfs / "etc" / "os-release").write_text(f"{MARKER}\n")
    (rootfs / "etc" / "tag").write_text(f"{tag}\n")  # each tag an image of its own
    for path in (rootfs / "bin", rootfs / "etc", rootfs / "bin" / "busybox"):
        path.chmod(0o755)  # whatever the test's umask
    for path in (rootfs / "etc" / "os-release", rootfs / "etc" / "tag"):
        path.chmod(0o644)
    run([*umoci, "repack", "--image", f"{layout}:{tag}", str(bundle)])
    run([*umoci, "config", "--image", f"{layout}:{tag}", "--config.env", "PATH=/bin"])
    shutil.rmtree(bundle)
    return layout


def run(argv: list[str]) -> None:
    subprocess.run(argv, check=True, capture_output=True, timeout=120)


@pytest.fixture
def image_store(host_tmp) -> Iterator[Path]:
    """A site's image store holding IMAGE."""
    store = host_tmp / "image-store"
    build_image(store)
    yield store


@pytest.fixture
def imaged(host_tmp, image_store) -> Iterator[LocalBackend]:
    """A sandboxed backend whose jobs' images come from ``image_store``."""
    with sandboxed_backend(host_tmp, image_store_dir=image_store) as backend:
        yield backend


def test_a_job_runs_in_its_image_as_its_owner_and_its_output_reaches_the_log(imaged, host_tmp):
    command = (
        "cat /etc/os-release; echo UID=$(id -u); echo PATH=$PATH;"
        " ls /usr/bin/python3 || echo NO-HOST-PYTHON; touch /probe || echo READ-ONLY-ROOT;"
        " echo written > made-in-image; echo CWD=$(pwd)"
    )
    job = launch(command, image=IMAGE)
    code, reason, log = run_to_end(imaged, command, image=IMAGE, job_id=job.job_id)
    assert code == 0, (reason, log)
    assert MARKER in log, log
    assert f"UID={job.run_as.uid}" in log, log
    assert "PATH=/bin\n" in log, log  # the image's, the job giving none
    assert "NO-HOST-PYTHON" in log and "READ-ONLY-ROOT" in log, log
    work = Path(log.split("CWD=", 1)[1].split()[0])  # the job's directory, bind-mounted
    made = work / "made-in-image"
    assert made.read_text() == "written\n"
    assert made.stat().st_uid == job.run_as.uid


def test_without_an_image_a_job_sees_the_host_s_system(imaged):
    code, _, log = run_to_end(imaged, "cat /etc/os-release")
    assert code == 0, log
    assert MARKER not in log
    assert Path("/etc/os-release").read_text().splitlines()[0] in log


def test_an_image_the_site_lacks_is_refused_saying_why(imaged):
    job = launch("true", image="trainyard-images-test/absent:2")
    with pytest.raises(LaunchRefused, match="absent:2 is not in this site's image store"):
        imaged.deploy(job)
    assert job.job_id not in imaged.reports()


def test_deploying_a_running_attempt_again_changes_nothing_though_its_image_left(
    imaged, image_store
):
    job = launch("echo STARTED; sleep 300", image=IMAGE)
    imaged.deploy(job)
    wait_until(logged(imaged, job.job_id, "STARTED"), 20, "the job to start")
    shutil.rmtree(image_store / IMAGE.split("/")[0])
    imaged.deploy(job)  # as the job manager may repeat it after a crash
    assert imaged.reports()[job.job_id].workers[0].state is WorkerState.RUNNING


def test_a_session_into_the_job_enters_its_image(imaged):
    job = launch("echo STARTED; sleep 300", image=IMAGE)
    imaged.deploy(job)
    wait_until(logged(imaged, job.job_id, "STARTED"), 20, "the job to start")
    session = in_session(imaged, job.job_id, "cat /etc/os-release; id -u; echo $PATH")
    assert session.returncode == 0, session.stderr
    assert session.stdout.splitlines() == [MARKER, str(job.run_as.uid), "/bin"]


def test_a_backend_without_an_image_store_refuses_a_job_naming_an_image(host_tmp):
    with (
        sandboxed_backend(host_tmp) as backend,
        pytest.raises(LaunchRefused, match="leave the image empty"),
    ):
        backend.deploy(launch("true", image=IMAGE))


def test_concurrent_deployments_unpack_an_image_once_into_one_root(image_store, host_tmp):
    store = ImageStore(image_store, host_tmp / "cache")
    roots, errors = [], []

    def unpack() -> None:
        try:
            roots.append(store.root_of(IMAGE))
        except Exception as error:  # reported below
            errors.append(error)

    threads = [threading.Thread(target=unpack) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not errors and len(roots) == 4
    assert len({root.rootfs for root in roots}) == 1
    unpacked = [path for path in (host_tmp / "cache").iterdir() if not path.name.startswith(".")]
    assert unpacked == [roots[0].rootfs.parent]
    assert not list((host_tmp / "cache").glob(".partial-*"))
    assert (roots[0].rootfs / "etc" / "os-release").read_text() == f"{MARKER}\n"


def test_a_half_unpacked_image_is_never_used(image_store, host_tmp):
    store = ImageStore(image_store, host_tmp / "cache")
    layout, _ = store.layout_of(IMAGE)
    digest = store.root_of(IMAGE).digest
    shutil.rmtree(host_tmp / "cache")
    # A crash left a partial unpack: it is thrown away, not taken for the image.
    partial = host_tmp / "cache" / f".partial-{digest.removeprefix('sha256:')}"
    (partial / "rootfs").mkdir(parents=True)
    (partial / "rootfs" / "left-by-a-crash").write_text("")
    root = store.root_of(IMAGE)
    assert not (root.rootfs / "left-by-a-crash").exists()
    assert (root.rootfs / "bin" / "busybox").exists()
    # A layer that cannot be read: unpacking fails, and nothing of it is kept.
    shutil.rmtree(host_tmp / "cache")
    for blob in (layout / "blobs" / "sha256").iterdir():
        if blob.stat().st_size > 100_000:  # busybox's layer
            blob.write_bytes(blob.read_bytes()[:50_000])
    with pytest.raises(ImageBroken, match="could not be unpacked"):
        store.root_of(IMAGE)
    assert [path.name for path in (host_tmp / "cache").iterdir() if "lock" not in path.name] == []


def test_a_gpu_worker_s_image_gets_the_host_s_driver_files_and_a_cpu_worker_s_none(
    host_tmp, image_store
):
    driver = host_tmp / "driver"  # stands in for the host's NVIDIA user-space driver
    driver.mkdir()
    (driver / "libcuda.so.550.54").write_text("the driver\n")
    (driver / "libcuda.so.1").symlink_to("libcuda.so.550.54")
    (driver / "libnvidia-ml.so.1").write_text("nvml\n")
    (driver / "libunrelated.so.1").write_text("not the driver's\n")
    for path in (driver, *driver.iterdir()):
        path.chmod(0o755)
    devices = host_tmp / "dev"  # /dev/null's numbers stand in for a GPU's
    devices.mkdir(mode=0o755)
    os.mknod(devices / "nvidia0", 0o666 | stat.S_IFCHR, os.stat("/dev/null").st_rdev)
    gpu_node = BackendNode("gpu-0", "A100", 1, 8000, 16384)
    probe = (
        "cat /usr/local/nvidia/lib64/libcuda.so.1; ls /usr/local/nvidia/lib64;"
        " echo LD=$LD_LIBRARY_PATH"
    )
    with sandboxed_backend(
        host_tmp, nodes=[gpu_node], image_store_dir=image_store, device_dir=devices,
        gpu_driver=str(driver),
    ) as backend:  # fmt: skip
        gpu_code, _, gpu_log = run_to_end(backend, probe, node="gpu-0", gpus=1, image=IMAGE)
        _, _, cpu_log = run_to_end(backend, probe, node="gpu-0", gpus=0, image=IMAGE)
    assert gpu_code == 0, gpu_log
    gpu_log = [line for line in gpu_log.splitlines() if not line.startswith("=== attempt")]
    assert gpu_log[:4] == ["the driver", "libcuda.so.1", "libcuda.so.550.54", "libnvidia-ml.so.1"]
    assert gpu_log[4] == "LD=/usr/local/nvidia/lib64"
    assert "No such file" in cpu_log and "LD=\n" in cpu_log


def test_the_cache_keeps_images_in_use_and_the_latest_used_and_removes_the_rest(
    image_store, host_tmp
):
    for tag in ("2", "3"):
        build_image(image_store, f"{IMAGE.rsplit(':', 1)[0]}:{tag}")
    references = [IMAGE.replace(":1", f":{tag}") for tag in ("1", "2", "3")]
    store = ImageStore(image_store, host_tmp / "cache", cache_keep=1)
    in_use, older, latest = (store.root_of(reference) for reference in references)
    assert len({in_use.digest, older.digest, latest.digest}) == 3
    bundle = host_tmp / "a-container.bundle"
    bundle.mkdir()
    mount_root(in_use.rootfs, bundle)  # as a running container's root
    try:
        os.utime(in_use.rootfs.parent, (1, 1))  # used long ago, but mounted
        os.utime(older.rootfs.parent, (2, 2))
        assert store.trim() == []  # each used in the last minutes: all kept

        removed = store.trim(now=time.time() + images.RECENT_USE_SECONDS + 60)

        assert removed == [older.digest.removeprefix("sha256:")]
        assert (bundle / "rootfs" / "etc" / "os-release").read_text() == f"{MARKER}\n"
        assert in_use.rootfs.is_dir() and latest.rootfs.is_dir()
        assert not older.rootfs.parent.exists()
        assert store.root_of(references[1]).rootfs.is_dir()  # unpacked again when asked
    finally:
        images.release_roots(host_tmp)


def test_a_reference_never_leads_out_of_the_store(host_tmp):
    store = ImageStore(host_tmp / "store", host_tmp / "cache")
    for reference in ("../etc:1", "./x:1", "a/../../b:1", ".hidden/x:1"):
        assert "is not an image reference" in store.missing(reference), reference
    layout, tag = store.layout_of("registry.example.com:5000/team/base@sha256:" + "a" * 64)
    assert layout == host_tmp / "store" / "registry.example.com_5000" / "team" / "base"
    assert tag == "sha256-" + "a" * 64
    # An index whose digest would name a path out of the cache names no image.
    forged = host_tmp / "store" / "forged"
    forged.mkdir(parents=True)
    entry = {"mediaType": MANIFEST, "digest": "sha256:../../etc", "annotations": {REF_NAME: "1"}}
    (forged / "index.json").write_text(json.dumps({"schemaVersion": 2, "manifests": [entry]}))
    assert "is not in this site's image store" in store.missing("forged:1")


@pytest.fixture
def registry(host_tmp, image_store) -> Iterator[str]:
    """A real registry (Debian's docker-registry) on a loopback port of the test's own,
    holding IMAGE, which the host's containers configuration lets skopeo reach without TLS
    (a drop-in of the test's own in /etc/containers/registries.conf.d, removed after).
    Yields its address."""
    if shutil.which("docker-registry") is None or shutil.which("skopeo") is None:
        pytest.skip("pulling needs skopeo, and its test docker-registry")
    port = free_port()
    address = f"127.0.0.1:{port}"
    config = host_tmp / "registry.yml"
    config.write_text(
        f"version: 0.1\nstorage:\n  filesystem:\n    rootdirectory: {host_tmp / 'registry'}\n"
        f"http:\n  addr: {address}\nlog:\n  level: error\n"
    )
    drop_in = REGISTRIES_CONF_D / f"trainyard-images-test-{port}.conf"
    server = subprocess.Popen(
        ["docker-registry", "serve", str(config)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        drop_in.write_text(f'[[registry]]\nlocation = "{address}"\ninsecure = true\n')
        wait_until(lambda: answers(f"http://{address}/v2/"), 20, "the registry")
        layout = image_store / IMAGE.rsplit(":", 1)[0]
        run(["skopeo", "copy", "--quiet", f"oci:{layout}:1", f"docker://{address}/{IMAGE}"])
        yield address
    finally:
        drop_in.unlink(missing_ok=True)
        server.terminate()
        server.wait(timeout=30)


def answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return bool(response.status == 200)
    except OSError:
        return False


def test_an_image_the_store_lacks_is_pulled_from_its_registry_where_the_site_allows(
    host_tmp, registry
):
    store = host_tmp / "pulled-store"
    reference = f"{registry}/{IMAGE}"
    with sandboxed_backend(host_tmp, image_store_dir=store, image_pull=True) as backend:
        code, reason, log = run_to_end(backend, "cat /etc/os-release", image=reference)
        assert code == 0, (reason, log)
        assert MARKER in log
        assert (store / registry.replace(":", "_") / IMAGE.split(":")[0] / "index.json").exists()
        with pytest.raises(LaunchRefused, match=f"{registry}/nowhere/absent:1 could not be pulled"):
            backend.deploy(launch("true", image=f"{registry}/nowhere/absent:1"))
