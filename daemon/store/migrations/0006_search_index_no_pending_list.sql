-- Full-text queries on a namespace that had a burst of writes scanned the GIN index's pending
-- list linearly until a vacuum merged it: measured on 100,000 records, the full-text step took
-- 10-17 ms before `VACUUM` and 2-5 ms after. Recall is read-mostly and a write's cost is
-- dominated by embedding, so new entries go straight into the index (PostgreSQL's documented
-- choice when "consistent response time is more important than update speed").
ALTER INDEX records_search SET (fastupdate = off);
SELECT gin_clean_pending_list('records_search'::regclass);
