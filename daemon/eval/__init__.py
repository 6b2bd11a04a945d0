"""`recalld eval`: golden sets, the ratchet floor and the eval run (SPEC §6, docs/EVAL.md)."""
