"""One module per experiment; each exposes `EXPERIMENT` (see `base.py`)."""
