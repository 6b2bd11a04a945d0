-- A record whose input the embedding provider refuses (too long, content it will not embed) or
-- answers with an unusable vector would otherwise be tried again, with its whole batch, on every
-- poll: its batch-mates never indexed, the provider asked the same thing every two seconds. A
-- hold sets that revision of the record aside until `retry_at` (the wait doubles with each
-- attempt); a new revision is tried at once, and storing its vectors ends the hold.
CREATE TABLE index_holds (
    space_id  text        NOT NULL REFERENCES vector_spaces (space_id),
    record_id uuid        NOT NULL REFERENCES records (id),
    revision  integer     NOT NULL,
    reason    text        NOT NULL,
    attempts  integer     NOT NULL DEFAULT 1 CHECK (attempts >= 1),
    held_at   timestamptz NOT NULL DEFAULT now(),
    retry_at  timestamptz NOT NULL,
    PRIMARY KEY (space_id, record_id)
);
