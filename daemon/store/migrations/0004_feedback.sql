-- Feedback on recall answers: which returned result was useful. One judgement per result of a
-- search (the latest wins); the rank is copied from the search row so statistics need no join.
CREATE TABLE search_feedback (
    search_id  uuid NOT NULL REFERENCES searches (id) ON DELETE CASCADE,
    record_id  uuid NOT NULL,
    rank       integer NOT NULL CHECK (rank >= 1),
    useful     boolean NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (search_id, record_id)
);
