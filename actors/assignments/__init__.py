"""Canonical assignments (SPEC §7): normalised values, the strategy chain, disputes and the
resolver's verdicts. The modules here are pure; the two tickers are `ticker` and `resolver`,
reaching PostgreSQL and the LLM through the protocols in `ports`."""
