"""The experiments, a folder per family: each family's workload, experiments and analysis side by
side (`mongo/`, `postgres/`, `fastapi/`), and the experiments that read more than one family
(`departures/`, `verify/`, `openloop_check/`). An experiment is a module that exposes `EXPERIMENT`
(an `Experiment`, see `base.py`); `analysis.py` is the kit every family's analysis shares."""
