"""The FastAPI family (seed 000): the app under test and its locustfile (`apps`), the workload that
starts and drives them (`workload`), the parameters its experiments share (`params`), the
experiments (`locust`, `crossover`, `openloop`) and their analysis (`analysis`).
"""
