"""A check of the tooling, not a figure of the study: the hand-written open-loop generator
(`harness.core.openloop`) against Vegeta on the FastAPI family's app.
"""
