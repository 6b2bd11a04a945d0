-- At most one live record per (namespace, source_path): an upsert looks its path up and then
-- creates, and two writers doing so at once each made a copy. The unique index below refuses the
-- second copy (the writer then revises the first instead).
--
-- A database written before may already hold such copies. Each path keeps its newest live copy
-- (the one changed last: what the latest writer wrote); the others are forgotten as a forget
-- does it (daemon/store/records.py: the tombstone keeps only id, namespace, kind and revision,
-- the chunks are retired, their text and vectors purged, and the change sequence moves on so the
-- indexers drop them), so nothing forgotten can come back.
WITH ranked AS (
    SELECT id,
           row_number() OVER (PARTITION BY namespace, source_path
                              ORDER BY updated_at DESC, created_at DESC, id DESC) AS newest
      FROM records
     WHERE deleted_at IS NULL AND source_path IS NOT NULL
), forgotten AS (
    UPDATE records r
       SET deleted_at = now(), updated_at = now(), change_seq = nextval('record_change_seq'),
           title = '', title_norm = '', body = '', attributes = '{}', source_path = NULL, content_hash = ''
      FROM ranked
     WHERE r.id = ranked.id AND ranked.newest > 1
 RETURNING r.id
), retired AS (
    UPDATE chunks c
       SET retired_at = now(), text = '', text_sha256 = ''
      FROM forgotten f
     WHERE c.record_id = f.id AND c.retired_at IS NULL
 RETURNING c.surrogate
)
DELETE FROM chunk_vectors v USING retired r WHERE v.surrogate = r.surrogate;

-- The unique index serves the look-ups by path the plain one did.
DROP INDEX records_source_path;
CREATE UNIQUE INDEX records_live_source_path ON records (namespace, source_path)
    WHERE deleted_at IS NULL AND source_path IS NOT NULL;
