"""`recalld eval`: golden sets, the ratchet floor and the eval run (docs/EVAL.md)."""
