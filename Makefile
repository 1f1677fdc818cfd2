# The two set-up commands of the README:  `make demo`  and  `make test`.
# Both install the pinned environment into .venv first (idempotent; reinstalls when the lock changes).

VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.liverl-installed

.PHONY: install demo test bench proto

$(STAMP): requirements.lock pyproject.toml infra/s3/package-lock.json
	python3.11 -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --no-deps -r requirements.lock
	$(VENV)/bin/pip install --quiet --no-deps --no-build-isolation -e .
	cd infra/s3 && npm ci --silent --no-audit --no-fund
	touch $(STAMP)

install: $(STAMP)

demo: install
	$(VENV)/bin/liverl demo

test: install
	bash scripts/run_tests.sh

bench: install
	bash scripts/run_benches.sh

proto: install
	$(PY) scripts/gen_proto.py
