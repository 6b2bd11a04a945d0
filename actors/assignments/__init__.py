"""Canonical assignments: normalised values, the strategy chain, disputes and the
resolver's verdicts. The modules here are pure; the two tickers are `ticker` and `resolver`,
reaching PostgreSQL and the LLM through `recalld.actors.ports.assignments`. The rules they
keep: docs/DESIGN.md, "Canonical assignments"."""
