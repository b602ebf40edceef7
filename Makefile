# Headroom: `make run` (install, migrate, load the catalog, serve) and `make test`.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
HOST ?= 127.0.0.1
PORT ?= 8000

.PHONY: run test install lint format worker beat migrate catalog bench clean

$(STAMP): pyproject.toml
	@test -x $(PY) || "$$(scripts/find-python)" -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[dev]"
	@touch $(STAMP)

install: $(STAMP)

migrate: install
	$(PY) manage.py migrate --noinput

catalog: migrate
	$(PY) manage.py load_catalog

run: catalog
	$(PY) manage.py runserver $(HOST):$(PORT)

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/lint-imports

format: install
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

test: lint
	$(VENV)/bin/pytest

worker: install
	$(VENV)/bin/celery -A config worker --loglevel=INFO --concurrency=$${WORKER_CONCURRENCY:-2}

beat: install
	$(VENV)/bin/celery -A config beat --loglevel=INFO

bench: install
	$(PY) bench/sizing.py --points 2000000

clean:
	rm -rf $(VENV) headroom.sqlite3 staticfiles .pytest_cache .ruff_cache
