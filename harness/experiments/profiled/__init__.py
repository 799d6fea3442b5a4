"""The profiled pass: where each client model spends its CPU (py-spy), kept apart from every verdict."""
