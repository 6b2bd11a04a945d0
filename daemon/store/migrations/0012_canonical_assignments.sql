-- Canonical assignments (docs/DESIGN.md). Each supplier's latest observation of a characteristic of an
-- entity is one vote; the assignment ticker turns the votes into one canonical row per
-- (entity, characteristic). `assignments_changed` lists what changed since its last tick: an
-- observation's transaction adds its key, the tick's transaction takes it, so a change is never
-- lost between the two however their commits interleave.
CREATE TABLE observations (
    entity         text NOT NULL,
    characteristic text NOT NULL,
    supplier       text NOT NULL,
    value          text NOT NULL,             -- as the supplier sent it
    normalised     text NOT NULL,             -- the voting form (actors/canonical/values.py)
    trust          double precision NOT NULL CHECK (trust >= 0 AND trust <= 1),
    observed_at    timestamptz NOT NULL,
    received_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (entity, characteristic, supplier)
);

CREATE TABLE assignments_changed (
    entity         text NOT NULL,
    characteristic text NOT NULL,
    PRIMARY KEY (entity, characteristic)
);

CREATE TABLE canonical_assignments (
    entity         text NOT NULL,
    characteristic text NOT NULL,
    value          text NOT NULL,
    source         text NOT NULL CHECK (source IN ('auto:trust_weighted', 'auto:mode', 'auto:latest',
                                                   'auto:llm_resolved', 'manual')),
    -- the value set the value was chosen from (disputes.value_set_hash): an auto:llm_resolved row
    -- is replaced by the chain only once its value set changed
    value_set_hash text NOT NULL,
    updated_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (entity, characteristic)
);

-- The resolver's LLM calls are metered like the embedder's.
ALTER TABLE usage DROP CONSTRAINT usage_purpose_check;
ALTER TABLE usage ADD CONSTRAINT usage_purpose_check
    CHECK (purpose IN ('index', 'query', 'dedupe', 'eval', 'probe', 'resolve'));
