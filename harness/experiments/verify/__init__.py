"""`harness verify`: the seeds' checks on a user's own workload file and server, over the MongoDB
and PostgreSQL families' workloads and analyses.
"""
