-- Golden-set eval runs (`recalld eval`, docs/EVAL.md): one row per run, so that a model or template
-- switch can be compared with the runs before it (`recalld eval --history`). The figures are
-- the client's, per route and kind: {route: {kind: {hit_at_5, of, mrr_at_10, recall_at_10,
-- ndcg_at_10}}}. `count`/`of` is the floor's measure (fused hit@5 over all questions); NULL when
-- the fused route was not run. A run outlives its namespace, which the eval forgets.
CREATE TABLE eval_runs (
    id           uuid PRIMARY KEY,
    recorded_at  timestamptz NOT NULL DEFAULT now(),
    started_at   timestamptz NOT NULL,
    duration_s   double precision NOT NULL CHECK (duration_s >= 0),
    golden       text NOT NULL,
    source       text NOT NULL,
    namespace    text NOT NULL,
    space        jsonb NOT NULL,
    space_id     text NOT NULL,
    questions    integer NOT NULL CHECK (questions >= 1),
    count        integer CHECK (count >= 0),
    "of"         integer CHECK ("of" >= 1),
    floor        integer CHECK (floor >= 0),
    verdict      text CHECK (verdict IN ('at_or_above_floor', 'below_floor', 'no_floor')),
    degraded     integer NOT NULL DEFAULT 0 CHECK (degraded >= 0),
    routes       jsonb NOT NULL,
    CHECK ((count IS NULL) = ("of" IS NULL)),
    CHECK (count IS NULL OR count <= "of")
);
CREATE INDEX eval_runs_golden_started ON eval_runs (golden, started_at DESC);
