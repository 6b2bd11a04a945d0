-- Copies of published generations that a daemon built from the stored vectors, not from the
-- builder's files: in a fleet each member has a data directory of its own, and nothing but
-- PostgreSQL is shared. A copy's files are not the builder's byte for byte (an HNSW graph built
-- twice differs), so loading one checks it against the manifest digest and count recorded here,
-- as the builder's files are checked against `generations`. A restore empties the generations'
-- catalogue, and their copies go with it.
CREATE TABLE generation_copies (
    generation_id   text NOT NULL REFERENCES generations (id) ON DELETE CASCADE,
    manifest_sha256 text NOT NULL,
    count           bigint NOT NULL CHECK (count >= 0),
    member          text NOT NULL,
    built_at        timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (generation_id, manifest_sha256)
);
