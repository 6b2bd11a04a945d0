-- Full-text vectors per chunk, so a record that only the full-text route found can still show
-- its best chunk as the snippet: ts_rank over a handful of stored chunk vectors instead of
-- ts_headline over a whole long body (about 150 ms for ten long pages). A retired chunk's text
-- is cleared, and this column with it.
ALTER TABLE chunks ADD COLUMN search tsvector GENERATED ALWAYS AS (to_tsvector('english', text)) STORED;
