"""What each pytest-xdist worker keeps of its own, set before Django reads its settings.

Loaded with ``-p tests.parallel`` (pyproject's addopts), so that this runs before
pytest-django imports ``backend.settings`` and before any server a test starts inherits
this process's environment. In a worker (``PYTEST_XDIST_WORKER`` is ``gw0``, ``gw1``, ...):

- ``TRAINYARD_VAR_DIR``: ``var/xdist-gw0/`` and so on, so that the prometheus multiprocess
  directory (var/metrics), the SQLite test database, the secret key and the control
  sockets of the servers a test starts are not another worker's;
- ``TRAINYARD_REDIS_PREFIX`` and ``TRAINYARD_CELERY_QUEUE``: suffixed with the worker, so
  that keys written under the default prefix (login throttling, the job manager's lease)
  and tasks sent to the default queue stay apart on a Redis all workers share
  (CI gives one REDIS_URL). Tests that want a namespace of their own still take one
  (``redis_namespace``, ``tests.servers.live_env``).

The database needs nothing here: pytest-django gives each worker a test database of its
own (``test_<name>_gw0``). A serial run (no worker) is left as it is.
"""

from __future__ import annotations

import os
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parent.parent
WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")

if WORKER:
    base = Path(os.environ.get("TRAINYARD_VAR_DIR") or REPOSITORY / "var")
    os.environ["TRAINYARD_VAR_DIR"] = str(base / f"xdist-{WORKER}")
    for name, default in (("TRAINYARD_REDIS_PREFIX", "trainyard"),
                          ("TRAINYARD_CELERY_QUEUE", "trainyard")):  # fmt: skip
        os.environ[name] = f"{os.environ.get(name) or default}-{WORKER}"
