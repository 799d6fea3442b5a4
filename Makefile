# The two commands of the README: `make study` (the main job) and `make test`.
PROFILE ?= full
REPEAT ?= 1
PY := .venv/bin/python

.PHONY: study test bootstrap servers-up servers-down report clean-venv

study: bootstrap
	$(PY) -m harness study --profile $(PROFILE) --repeat $(REPEAT)

test:
	bash scripts/bootstrap --test
	$(PY) -m pytest

bootstrap:
	bash scripts/bootstrap

report: bootstrap
	$(PY) -m harness report

servers-up: bootstrap
	$(PY) -m harness servers up

servers-down:
	$(PY) -m harness servers down

clean-venv:
	rm -rf .venv
