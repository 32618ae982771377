# Trainyard: `make run` starts the whole system, `make test` runs the whole suite.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: run test test-sqlite lint format install schema bench clean

install: $(STAMP)

$(STAMP): pyproject.toml constraints.txt deploy/install-system-packages.sh
	./deploy/install-system-packages.sh
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -c constraints.txt -e '.[dev]'
	touch $(STAMP)

run: install
	$(PY) manage.py run_trainyard

test: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	./deploy/run-tests.sh

# The same suite on SQLite, whatever DATABASE_URL says.
test-sqlite: install
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

bench: install
	./deploy/install-system-packages.sh wrk
	$(PY) -m bench.api_latency.run

clean:
	rm -rf $(VENV) var
