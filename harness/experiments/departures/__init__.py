"""The departures cells: where this machine departs from the seeds' (interpreter, driver versions,
placement, network), over the MongoDB and PostgreSQL families' workloads; `child` runs one cell.
"""
