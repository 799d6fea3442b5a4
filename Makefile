# The two commands of the README: `make study` (the main job) and `make test`.
PROFILE ?= full
# REPEAT=N runs every experiment N times; empty: each experiment's own count for the profile
REPEAT ?=
# PYTHONS="3.11 3.12 3.13": one run per interpreter (harness.core.interpreters); PLACEMENT=split pins
# servers and client to separate cores (harness.core.placement)
PYTHONS ?=
PLACEMENT ?= shared
PY := .venv/bin/python

.PHONY: study test bootstrap lock servers-up servers-down report clean-venv

study: bootstrap
	$(PY) -m harness study --profile $(PROFILE) $(if $(REPEAT),--repeat $(REPEAT)) $(foreach p,$(PYTHONS),--python $(p)) --placement $(PLACEMENT)

test:
	bash scripts/bootstrap --test
	$(PY) -m pytest

bootstrap:
	bash scripts/bootstrap

# Regenerate requirements.lock (every Python package pinned, one universal lock for Python
# 3.11-3.13) from pyproject.toml, then install it. Pins already in the lock are kept unless
# a new requirement needs otherwise; `make lock LOCK_FLAGS=--upgrade` moves every pin to the newest.
LOCK_FLAGS ?=
lock:
	bash scripts/bootstrap
	.venv/bin/uv pip compile pyproject.toml --extra dev --universal --python-version 3.11 \
	  --custom-compile-command \
	  "make lock   (runs: uv pip compile pyproject.toml --extra dev --universal --python-version 3.11 -o requirements.lock)" \
	  $(LOCK_FLAGS) -o requirements.lock
	bash scripts/bootstrap

report: bootstrap
	$(PY) -m harness report

servers-up: bootstrap
	$(PY) -m harness servers up

servers-down:
	$(PY) -m harness servers down

clean-venv:
	rm -rf .venv
