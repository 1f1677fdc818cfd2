# The two set-up commands of the README:  `make demo`  and  `make test`.
# Both install the pinned environment into .venv first (idempotent; reinstalls when the lock changes).

VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.liverl-installed

.PHONY: install demo demo-toy test bench proto

$(STAMP): requirements.lock pyproject.toml
	python3.11 -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --no-deps -r requirements.lock
	$(VENV)/bin/pip install --quiet --no-deps --no-build-isolation -e .
	touch $(STAMP)

install: $(STAMP)

# The loop on the real model, SmolLM2-135M-Instruct, ending with its held-out success against the base.
demo: install
	$(VENV)/bin/liverl demo @ configs/demo-smollm2.toml

# The same loop on a 4-layer toy policy: minutes faster, the rise in reward plain to see.
demo-toy: install
	$(VENV)/bin/liverl demo @ configs/demo.toml

test: install
	bash scripts/run_tests.sh

bench: install
	bash scripts/run_benches.sh

proto: install
	$(PY) scripts/gen_proto.py
