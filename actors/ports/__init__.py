"""The ports through which actors reach the outside world: only Protocols and plain data, so that
`recalld.actors` never imports a driver. `recalld.store` and `recalld.providers` implement them;
tests/support holds in-memory fakes of some, each pinned by a contract test against PostgreSQL.

One module per feature: `embedding` (the provider and its vector space), `usage` (what each
call was for, where it is recorded), `index` (chunks, vectors, generations, the builder lock),
`duplicates` (stored title vectors), `assignments` (observations, disputes, the LLM), `gc`
(retention of searches and disputes)."""
