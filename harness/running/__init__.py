"""Running one study end to end: the plan and its repeats (`study`), each repeat in a fresh
process (`worker`), and `harness verify` on a user's own target (`verify`)."""
