# Trainyard: `make run` starts the whole system, `make test` runs the whole suite.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: run test test-sqlite lint format install schema bench clean frontend frontend-test screenshots

# The dashboard: npm ci when the lock file changed, a Vite build when its sources changed.
FRONTEND_SOURCES := $(shell find frontend/src frontend/index.html frontend/vite.config.ts -type f 2>/dev/null)
FRONTEND_MODULES := frontend/node_modules/.installed

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

frontend/dist/index.html: $(FRONTEND_MODULES) $(FRONTEND_SOURCES)
	cd frontend && npm run build

frontend: frontend/dist/index.html

# The dashboard's component tests (Vitest, jsdom) and its type check.
frontend-test: $(FRONTEND_MODULES)
	cd frontend && npm run typecheck && npm test

run: install frontend
	$(PY) manage.py run_trainyard

test: install frontend frontend-test
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	./deploy/run-tests.sh

# The same suite on SQLite, whatever DATABASE_URL says.
test-sqlite: install frontend
	DATABASE_URL= ./deploy/run-tests.sh

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

format: install
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

# Regenerate docs/openapi.yaml and the API reference built from it (docs/api.md).
schema: install
	$(PY) manage.py spectacular --validate --fail-on-warn --file docs/openapi.yaml
	$(PY) manage.py api_reference --output docs/api.md

# Photograph every dashboard page (the browser e2e run) into docs/screenshots/.
screenshots: install frontend
	TRAINYARD_SCREENSHOT_DIR=docs/screenshots ./deploy/run-tests.sh tests/e2e -q

bench: install
	./deploy/install-system-packages.sh wrk
	$(PY) -m bench.api_latency.run

clean:
	rm -rf $(VENV) var frontend/node_modules frontend/dist
