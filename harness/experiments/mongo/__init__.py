"""The MongoDB family (seed 001 and the 001 side of 000): its closed-loop workload (`workload`),
its experiments (`cursor`, `pool`, `client`, `bulk`, `models`) and their analysis (`analysis`).
"""
