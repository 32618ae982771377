# Trainyard: `make run` starts the whole system, `make test` runs the whole suite (lint, types,
# the dashboard's tests, then pytest).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# pytest's processes for the whole suite (pytest-xdist); 0 runs it serially.
PYTEST_XDIST_WORKERS ?= 3

.PHONY: run training-env stop-jobs test test-sqlite lint format install schema api-types api-types-check bench clean frontend frontend-test screenshots

# The dashboard: npm ci when the lock file changed, a Vite build when its sources changed.
FRONTEND_SOURCES := $(shell find frontend/src frontend/index.html frontend/vite.config.ts -type f 2>/dev/null)
FRONTEND_MODULES := frontend/node_modules/.installed
# openapi-typescript, a package of its own (it needs TypeScript 5; the dashboard has 7).
API_TYPES_TOOL := frontend/tools/api-types/node_modules/.installed

install: $(STAMP)

$(STAMP): pyproject.toml constraints.txt deploy/install-system-packages.sh
	./deploy/install-system-packages.sh
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -c constraints.txt -e '.[dev]'
	touch $(STAMP)

$(FRONTEND_MODULES): frontend/package.json frontend/package-lock.json
	./deploy/install-system-packages.sh nodejs chromium
	cd frontend && npm ci --no-audit --no-fund
	touch $(FRONTEND_MODULES)

$(API_TYPES_TOOL): frontend/tools/api-types/package.json frontend/tools/api-types/package-lock.json
	./deploy/install-system-packages.sh nodejs
	cd frontend/tools/api-types && npm ci --no-audit --no-fund
	touch $(API_TYPES_TOOL)

# The dashboard's API types (frontend/src/generated/openapi.d.ts) from the backend's schema:
# api-types writes them (commit the result), api-types-check fails when they are stale.
api-types: install $(API_TYPES_TOOL)
	./deploy/api-types.sh

api-types-check: install $(API_TYPES_TOOL)
	./deploy/api-types.sh --check

frontend/dist/index.html: $(FRONTEND_MODULES) $(FRONTEND_SOURCES)
	cd frontend && npm run build

frontend: frontend/dist/index.html

# The dashboard's API types up to date with the backend, its type check and component tests
# (Vitest, jsdom).
frontend-test: $(FRONTEND_MODULES) api-types-check
	cd frontend && npm run typecheck && npm test

run: install frontend training-env
	$(PY) manage.py run_trainyard

# The training environment every job account may use (TRAINYARD_TRAINING_ENV: PyTorch CPU,
# JupyterLab, TensorBoard, pinned in deploy/training-env/): built once, then found current.
training-env: install
	$(PY) manage.py build_training_env

# Kill the jobs a stopped make run left running (the next start adopts them otherwise).
stop-jobs: install
	$(PY) manage.py stop_jobs

test: install frontend frontend-test
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	PYTEST_XDIST_WORKERS=$(PYTEST_XDIST_WORKERS) ./deploy/run-tests.sh

# The same suite on SQLite, whatever DATABASE_URL says.
test-sqlite: install frontend
	DATABASE_URL= PYTEST_XDIST_WORKERS=$(PYTEST_XDIST_WORKERS) ./deploy/run-tests.sh

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

format: install
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

# Regenerate docs/openapi.yaml and the API reference built from it (docs/api.md).
schema: install
	$(PY) manage.py spectacular --validate --fail-on-warn --file docs/openapi.yaml
	$(PY) manage.py api_reference --output docs/api.md
	$(MAKE) api-types

# Photograph every dashboard page (the browser e2e run) into docs/screenshots/.
screenshots: install frontend
	TRAINYARD_SCREENSHOT_DIR=docs/screenshots ./deploy/run-tests.sh tests/e2e -q

bench: install
	./deploy/install-system-packages.sh wrk
	$(PY) -m bench.api_latency.run

clean:
	rm -rf $(VENV) var frontend/node_modules frontend/dist
