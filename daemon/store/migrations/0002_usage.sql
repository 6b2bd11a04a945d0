-- Metering: one row per provider call and (purpose, namespace) it served.
-- `namespace` is NULL for the daemon's own work (the start-up probe); system purposes
-- (probe, eval) never count in a client's totals.
CREATE TABLE usage (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at            timestamptz NOT NULL,
    purpose       text NOT NULL CHECK (purpose IN ('index', 'query', 'dedupe', 'eval', 'probe')),
    namespace     text,
    provider      text NOT NULL,
    -- NULL when the model is not in the price catalogue (and then the cost is 0)
    model         text,
    input_tokens  bigint NOT NULL CHECK (input_tokens >= 0),
    output_tokens bigint NOT NULL DEFAULT 0 CHECK (output_tokens >= 0),
    -- tokens counted or estimated here because the provider reported none
    estimated     boolean NOT NULL,
    cost_micros   bigint NOT NULL CHECK (cost_micros >= 0)
);
CREATE INDEX usage_namespace_purpose_at ON usage (namespace, purpose, at);
