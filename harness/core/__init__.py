"""The ground floor every family and command stands on: servers, the network path and child
processes; runs on disk; statistics and pooling; datasets; the machine; the loop probe and the
measurement toolkit; the claims ledger as data, verdict words and the seeds' lines; configuration.
Nothing here imports from `harness.experiments` or above (the import contract in pyproject.toml).
"""
