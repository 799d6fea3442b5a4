"""Reading stored runs, one module per command (`compare`, `show`, `history`) and what they
share (`readout`); they work from manifest.json and summary.json alone.
"""
