"""The PostgreSQL family (seed 002): the four client models' workload (`workload`, also run as a
child), the experiments (`models`, `ceiling`) and their analysis (`analysis`).
"""
