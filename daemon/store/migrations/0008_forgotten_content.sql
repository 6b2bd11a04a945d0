-- A forget used to keep the record's title, body, attributes and path in its tombstone row.
-- Nothing could read them, but text someone chose to forget stayed in the database. Forgets
-- now clear them (daemon/store/records.py, FORGOTTEN_CONTENT); this clears the older tombstones.
UPDATE records
   SET title = '', title_norm = '', body = '', attributes = '{}', source_path = NULL, content_hash = ''
 WHERE deleted_at IS NOT NULL;
