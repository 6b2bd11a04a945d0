-- Forgets and updates used to keep the vectors of the chunks they retired (vectors can be partly
-- inverted back to text) and the chunk text's hash, and every update added more. Nothing reads a
-- retired chunk's vector: deltas and builds take live chunks only, and an earlier generation
-- carries its own vectors in its file. They now go in the retiring transaction
-- (daemon/store/records.py); this purges what older forgets and updates left.

-- Deleting by surrogate alone (the retiring write, the cascade from `chunks` when the sweeper
-- deletes a surrogate row) would otherwise scan the whole table: its key leads with the space.
CREATE INDEX chunk_vectors_surrogate ON chunk_vectors (surrogate);

DELETE FROM chunk_vectors v USING chunks c WHERE c.surrogate = v.surrogate AND c.retired_at IS NOT NULL;
UPDATE chunks SET text = '', text_sha256 = '' WHERE retired_at IS NOT NULL AND (text <> '' OR text_sha256 <> '');
