-- The job queues are claimed in id order, each claim starting after the last one's rows (issue 30).
--
-- A claim read its queue's index from the start: past the entries of every row finished since the last vacuum
-- (a row that gets its transfer identifier or migrates leaves the index's predicate, but its entry stays until
-- VACUUM), and past the rows other workers hold. In a million-user rehearsal's exchange a claim of 500 rows read
-- 1,000 to 12,000 index and heap pages; at ten million users autovacuum comes ten times less often and each claim
-- read ten times as far. A claim now goes on from the id the last one reached (TransferQueue.claim), which needs
-- the index in id order; the id is unique and never NULL (old_sub is NULL for a recipient's imported rows), and an
-- entry is 8 bytes instead of a subject's 44.
DROP INDEX baton.transfers_exchange_queue_idx;
DROP INDEX baton.transfers_sender_queue_idx;
CREATE INDEX transfers_exchange_queue_idx ON baton.transfers (next_attempt_at NULLS FIRST, id)
    WHERE state = 'pending' AND transfer_sub IS NOT NULL;
CREATE INDEX transfers_sender_queue_idx ON baton.transfers (next_attempt_at NULLS FIRST, id)
    WHERE state = 'pending' AND transfer_sub IS NULL;
