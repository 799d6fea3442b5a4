"""Judging a run: the claims ledger applied to its repeats (`claims`), its `summary.json`
(`summary`), the seeds' lessons read from it (`findings`) and the answer to an engineer
(`answer`)."""
