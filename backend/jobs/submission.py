"""The rules a job submission must pass before it is stored, each failure naming its field."""

from __future__ import annotations

import re
import shlex
import unicodedata
from decimal import Decimal
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, TypedDict

from django.conf import settings
from django.db.models import Exists, OuterRef, QuerySet

from backend.clusters.models import GpuType, Node
from backend.jobs.job_request import BIDI_CONTROLS, RequestedResources
from backend.jobs.models import JobType
from backend.jobs.usage import user_guaranteed_gpus
from backend.vcs.models import Quota, VirtualCluster
from jobmanager.backends.images import ImageStore

if TYPE_CHECKING:
    from django.contrib.auth.models import AnonymousUser, User
    from django_stubs_ext import WithAnnotations


class WorkerFit(TypedDict):
    """What ``quota_with_worker_fit`` annotates a quota with."""

    worker_fits: bool


ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
RESERVED_ENV_PREFIXES = ("TRAINYARD_",)
RESERVED_ENV_NAMES = {"WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"}
MAX_ENV_ENTRIES = 200
# One argument or environment entry, in bytes: the kernel's MAX_ARG_STRLEN (128 KiB) counts
# the terminating NUL; a longer one cannot be exec'd ("Argument list too long").
MAX_ARGUMENT_BYTES = 128 * 1024 - 1
# The command and the environment together, well under the kernel's ARG_MAX (2 MiB with
# the usual 8 MiB stack), leaving room for what Trainyard sets.
MAX_LAUNCH_BYTES = 1024 * 1024
# registry[:port]/path[:tag][@digest], as the OCI distribution spec names references.
IMAGE_REFERENCE = re.compile(
    r"^(?:[a-zA-Z0-9.-]+(?::[0-9]+)?/)?[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
    r"(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*(?::[\w][\w.-]{0,127})?"
    r"(?:@sha256:[a-f0-9]{64})?$"
)

FieldErrors = dict[str, list[str]]


def utf8_size(text: str) -> int | None:
    """The text's size in UTF-8 bytes; None when it holds a lone surrogate (no UTF-8)."""
    try:
        return len(text.encode("utf-8"))
    except UnicodeEncodeError:
        return None


def counted(count: int | Decimal, unit: str) -> str:
    """A count with its unit as people write it: "1 GPU", "8 GPUs", "10000 CPUs", "0.5 CPU"
    (a decimal without its trailing zeros, never in exponent form)."""
    number = f"{count.normalize():f}" if isinstance(count, Decimal) else str(count)
    return f"{number} {unit}" if count == 1 or (0 < count < 1) else f"{number} {unit}s"


def duration_text(seconds: int) -> str:
    """Seconds as days, hours, minutes and seconds: "7 d", "2 h 30 min", "90 s" -> "1 min 30 s"."""
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, rest = divmod(rest, 60)
    parts = [(days, "d"), (hours, "h"), (minutes, "min"), (rest, "s")]
    return " ".join(f"{value} {unit}" for value, unit in parts if value) or "0 s"


def check_command(command: str) -> list[str]:
    if not command.strip():
        return ["Give the command to run, e.g. 'python train.py --epochs 10'."]
    size = utf8_size(command)
    if size is None:
        return ["The command is not valid Unicode (it holds a lone surrogate)."]
    if size > MAX_ARGUMENT_BYTES:
        return [
            f"The command is {size:,} bytes in UTF-8; at most {MAX_ARGUMENT_BYTES:,} (128 KiB) "
            "can be run. Put a long script in a file and run the file."
        ]
    if "\x00" in command:
        return ["The command contains a NUL character."]
    try:
        shlex.split(command)
    except ValueError as error:
        return [f"The command is not a well-formed shell command: {error}."]
    return []


def check_env(env: object) -> list[str]:
    if not isinstance(env, dict):
        return ['Give the environment as an object of names to strings, e.g. {"LR": "0.1"}.']
    if len(env) > MAX_ENV_ENTRIES:
        return [f"At most {MAX_ENV_ENTRIES} environment variables."]
    errors = []
    for name, value in env.items():
        if not ENV_NAME.match(name):
            errors.append(f"{name!r} is not a valid variable name (letters, digits, _).")
        elif name.startswith(RESERVED_ENV_PREFIXES) or name in RESERVED_ENV_NAMES:
            errors.append(f"{name} is set by Trainyard and cannot be given.")
        elif not isinstance(value, str):
            errors.append(f"The value of {name} must be a string.")
        elif "\x00" in value:
            errors.append(f"The value of {name} contains a NUL character.")
        elif (size := utf8_size(f"{name}={value}")) is None:
            errors.append(f"The value of {name} is not valid Unicode (a lone surrogate).")
        elif size > MAX_ARGUMENT_BYTES:
            errors.append(
                f"{name}=... is {size:,} bytes in UTF-8; an environment entry can be at most "
                f"{MAX_ARGUMENT_BYTES:,} (128 KiB)."
            )
    return errors


def check_launch_size(command: str, env: dict[str, str]) -> list[str]:
    """The command and the environment together must fit what the kernel can exec."""
    sizes = [utf8_size(command), *(utf8_size(f"{name}={value}") for name, value in env.items())]
    known_sizes = [size for size in sizes if size is not None]
    if len(known_sizes) < len(sizes):
        return []  # reported by the field's own check
    total = sum(size + 1 for size in known_sizes)
    if total > MAX_LAUNCH_BYTES:
        return [
            f"The command and environment are {total:,} bytes together; at most "
            f"{MAX_LAUNCH_BYTES:,} (1 MiB)."
        ]
    return []


def check_name(name: str) -> list[str]:
    """A job name is shown in lists and logs: no control characters, no bidi controls."""
    if utf8_size(name) is None:
        return ["The name is not valid Unicode (it holds a lone surrogate)."]
    if any(unicodedata.category(char) == "Cc" for char in name):
        return ["The name contains a control character (such as a newline or escape)."]
    if any(char in BIDI_CONTROLS for char in name):
        return [
            "The name contains a bidirectional control character (U+202A-U+202E, "
            "U+2066-U+2069, U+200E, U+200F, U+061C), which shows text in another order."
        ]
    return []


def check_image(image: str) -> list[str]:
    if not image:
        if settings.TRAINYARD_BACKEND == "kubernetes":
            return ["Give a container image; this cluster runs jobs in containers."]
        return []
    if not IMAGE_REFERENCE.match(image):
        return [f"{image!r} is not a container image reference such as 'pytorch/pytorch:2.4'."]
    if settings.TRAINYARD_BACKEND == "local":
        return local_image_errors(image)
    return []


def local_image_errors(image: str) -> list[str]:
    """Why the local backend cannot run ``image`` ([] when it can, or may: an image to be
    pulled, or a store this process cannot read, is left to the deployment)."""
    leave_empty = "leave the image empty to run on the host's system"
    if settings.TRAINYARD_LOCAL_SANDBOX == "none":
        return [f"Images run only in the sandbox, which this site does not use: {leave_empty}."]
    if not settings.TRAINYARD_LOCAL_IMAGE_STORE:
        return [f"This site keeps no images for the local backend: {leave_empty}."]
    store = ImageStore(
        Path(settings.TRAINYARD_LOCAL_IMAGE_STORE), Path(), settings.TRAINYARD_LOCAL_IMAGE_PULL
    )
    missing = store.missing(image)
    return [f"{missing} Leave it empty to run on the host's system."] if missing else []


def check_path(path: str) -> list[str]:
    if not path:
        return []
    if "\x00" in path:
        return ["The path contains a NUL character."]
    if utf8_size(path) is None:
        return ["The path is not valid Unicode (it holds a lone surrogate)."]
    if not path.startswith("/"):
        return ["Give an absolute path, starting with '/'."]
    if ".." in path.split("/"):
        return ["The path may not contain '..'."]
    if PurePosixPath(path).parts[1:2] == ("proc",):
        return ["The path may not be under /proc: that is the kernel's view of processes."]
    return []


def fitting_nodes(request: RequestedResources) -> QuerySet:
    """Nodes of the job's GPU type that one of its workers fits on."""
    return Node.objects.filter(
        gpu_type=request.gpu_type,
        gpus__gte=request.gpus_per_worker,
        cpus__gte=request.cpus_per_worker,
        memory__gte=request.memory_per_worker,
    )


def explain_no_fit(request: RequestedResources) -> FieldErrors:
    """Why no node fits a worker, naming the resource that is short."""
    nodes = Node.objects.filter(gpu_type=request.gpu_type)
    if not nodes.exists():
        return {"gpu_type": [f"No {request.gpu_type.name} nodes are registered in the cluster."]}
    fits_gpus = nodes.filter(gpus__gte=request.gpus_per_worker)
    if not fits_gpus.exists():
        most_gpus = max(nodes.values_list("gpus", flat=True))
        return {
            "gpus_per_worker": [
                f"The largest {request.gpu_type.name} node has {counted(most_gpus, 'GPU')}; a "
                f"worker asks for {request.gpus_per_worker}. Use more workers with fewer GPUs "
                "each."
            ]
        }
    fits_cpus = fits_gpus.filter(cpus__gte=request.cpus_per_worker)
    if not fits_cpus.exists():
        most_cpus = max(fits_gpus.values_list("cpus", flat=True))
        return {
            "cpus_per_worker": [
                f"No {request.gpu_type.name} node with "
                f"{counted(request.gpus_per_worker, 'GPU')} has "
                f"{counted(request.cpus_per_worker, 'CPU')}; the most is "
                f"{counted(most_cpus, 'CPU')}."
            ]
        }
    most_memory = max(fits_cpus.values_list("memory", flat=True))
    return {
        "memory_per_worker": [
            f"No {request.gpu_type.name} node that fits the GPUs and CPUs has "
            f"{request.memory_per_worker} MiB of memory; the most is {most_memory} MiB."
        ]
    }


def quota_errors(request: RequestedResources, quota: Quota | None) -> FieldErrors:
    """A non-preemptible job must fit in its VC's quota, which is all it can ever be given."""
    name, vc_name = request.gpu_type.name, request.vc.name
    borrow = "Submit it as preemptible to borrow idle capacity."
    if quota is None:
        return {"gpu_type": [f"VC {vc_name} has no {name} quota. {borrow}"]}
    errors: FieldErrors = {}
    total_gpus = request.workers * request.gpus_per_worker
    if total_gpus > quota.gpus:
        errors["gpus_per_worker"] = [
            f"The job needs {total_gpus} {name} GPUs in all; VC {vc_name}'s quota is "
            f"{quota.gpus}. {borrow}"
        ]
    total_cpus = request.workers * request.cpus_per_worker
    if total_cpus > quota.cpus:
        errors["cpus_per_worker"] = [
            f"The job needs {counted(total_cpus, 'CPU')} in all; VC {vc_name}'s {name} quota "
            f"is {counted(quota.cpus, 'CPU')}. {borrow}"
        ]
    total_memory = request.workers * request.memory_per_worker
    if total_memory > quota.memory:
        errors["memory_per_worker"] = [
            f"The job needs {total_memory} MiB in all; VC {vc_name}'s {name} quota is "
            f"{quota.memory} MiB. {borrow}"
        ]
    return errors


def check_vc_limits(request: RequestedResources) -> FieldErrors:
    errors: FieldErrors = {}
    if request.max_wall_time > request.vc.max_wall_time:
        limit, asked = request.vc.max_wall_time, request.max_wall_time
        errors["max_wall_time"] = [
            f"VC {request.vc.name} allows at most {duration_text(limit)} ({limit} seconds); "
            f"this job asks for {duration_text(asked)} ({asked} seconds)."
        ]
    total_gpus = request.workers * request.gpus_per_worker
    if request.type == JobType.INTERACTIVE and total_gpus > request.vc.max_interactive_gpus:
        errors["gpus_per_worker"] = [
            f"Interactive jobs in VC {request.vc.name} may hold at most "
            f"{request.vc.max_interactive_gpus} GPUs; this one asks for {total_gpus}."
        ]
    return errors


def quota_with_worker_fit(
    vc: VirtualCluster,
    gpu_type_name: str,
    gpus: int,
    cpus: Decimal | None,
    memory: int | None,
) -> WithAnnotations[Quota, WorkerFit] | None:
    """The usual submission's lookups in one query: the VC's quota of the named GPU type,
    with the type itself, annotated ``worker_fits``: whether a node of the type fits one
    worker, whose CPU and memory, when left out, are the type's t-shirt size."""
    units = max(gpus, 1)
    fitting = Node.objects.filter(
        gpu_type=OuterRef("gpu_type"),
        gpus__gte=gpus,
        cpus__gte=cpus if cpus is not None else OuterRef("gpu_type__cpus_per_gpu") * units,
        memory__gte=(
            memory if memory is not None else OuterRef("gpu_type__memory_per_gpu") * units
        ),
    )
    return (
        Quota.objects.select_related("gpu_type")
        .filter(vc=vc, gpu_type__name=gpu_type_name)
        .annotate(worker_fits=Exists(fitting))
        .order_by()
        .first()
    )


def check_request(
    request: RequestedResources, quota: WithAnnotations[Quota, WorkerFit] | None
) -> FieldErrors:
    """All resource rules (VC limits, then the largest node, then the quota); the first
    error per field wins. ``quota`` is what ``quota_with_worker_fit`` found: None for a
    preemptible job, or when the VC has no quota of that GPU type."""
    fits = quota.worker_fits if quota is not None else fitting_nodes(request).exists()
    errors = check_vc_limits(request)
    findings = [{} if fits else explain_no_fit(request)]
    if not request.preemptible:
        findings.append(quota_errors(request, quota))
    for found in findings:
        for field_name, messages in found.items():
            errors.setdefault(field_name, messages)
    return errors


def needs_approval(request: RequestedResources, user_id: int) -> str:
    """Why the job waits for a VC admin (the per-user GPU limit), or '' when it need not."""
    limit = request.vc.user_gpu_limit
    if limit is None or request.preemptible:
        return ""
    return approval_message(request, user_guaranteed_gpus(user_id, request.vc.id))


def approval_message(request: RequestedResources, held: int) -> str:
    """Why the job waits for a VC admin when its owner already holds ``held`` guaranteed
    GPUs in its VC, or '' when it need not."""
    limit = request.vc.user_gpu_limit
    if limit is None or request.preemptible:
        return ""
    wanted = request.workers * request.gpus_per_worker
    if held + wanted <= limit:
        return ""
    return (
        f"Waiting for a VC admin's approval: with this job you would hold {held + wanted} "
        f"non-preemptible GPUs in VC {request.vc.name}, above its per-user limit of {limit}."
    )


def nodes_with_labels(gpu_type: GpuType, selector: dict[str, str]) -> list[str]:
    """Nodes of the GPU type carrying every label of the selector (read in Python: JSON
    containment is not portable across MySQL and SQLite, and node counts are small)."""
    return [
        name
        for name, labels in Node.objects.filter(gpu_type=gpu_type).values_list("name", "labels")
        if all((labels or {}).get(key) == value for key, value in selector.items())
    ]


def visible_vc_for_submission(user: User | AnonymousUser, name: str) -> VirtualCluster | None:
    """The VC by name if the user may submit into it: one they see (members; cluster
    admins anywhere)."""
    return VirtualCluster.objects.visible_to(user).filter(name=name).order_by().first()
