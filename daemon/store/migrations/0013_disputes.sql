-- Disputes (docs/DESIGN.md, "Canonical assignments"): one row per (entity, characteristic) whose
-- strategy chain tied. The moderation queue is the rows in `manual_review`. States and their
-- transitions: actors/assignments/disputes.py.
CREATE TABLE disputes (
    id                uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    entity            text NOT NULL,
    characteristic    text NOT NULL,
    state             text NOT NULL CHECK (state IN ('pending', 'in_progress', 'resolved', 'manual_review',
                                                     'superseded', 'skipped_unchanged')),
    value_set_hash    text NOT NULL,
    candidates        jsonb NOT NULL,         -- [{value, trust, suppliers, raws}]
    tied              jsonb NOT NULL,         -- the strategies that tied, in chain order
    winning_value     text NOT NULL,          -- the canonical value now
    -- the resolver's last answer
    tier              text CHECK (tier IN ('high', 'medium', 'low')),
    confidence        double precision,
    confidence_source text CHECK (confidence_source IN ('model', 'logprobs')),
    model_confidence  double precision,       -- what the model wrote, beside a logprob-derived one
    selected_value    text,
    reason            text,                   -- why it went to moderation (ResolverReason)
    attempts          integer NOT NULL DEFAULT 0,
    -- the last value set resolved (by the resolver or a moderator) and what was chosen: a dispute
    -- that comes back to it is skipped_unchanged and that answer stands
    resolved_hash     text,
    resolved_value    text,
    decision          text CHECK (decision IN ('approve', 'override', 'reject', 'escalate', 'force')),
    created_at        timestamptz NOT NULL DEFAULT now(),
    updated_at        timestamptz NOT NULL DEFAULT now(),
    UNIQUE (entity, characteristic)
);
CREATE INDEX disputes_state ON disputes (state, updated_at);
