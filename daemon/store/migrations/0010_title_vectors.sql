-- Semantic duplicate checks (docs/DUPLICATES.md) compare a new title with every live title of its namespace
-- and kind. Each title's vector is stored once per space, keyed by the SHA-256 of its normalised
-- title (actors.records.normalise_title), so a check costs one embedding call (the new title)
-- however many records exist, and a model switch re-embeds titles as it re-embeds chunks.
-- Keyed by the hash, not by the record: records of several namespaces or kinds with the same
-- title share a vector, and a vector outlives no live title (the index manager deletes orphans).
CREATE TABLE title_vectors (
    space_id     text NOT NULL REFERENCES vector_spaces (space_id),
    title_sha256 text NOT NULL,
    vector       bytea NOT NULL,  -- float32, little-endian, `dimension` values
    PRIMARY KEY (space_id, title_sha256)
);
