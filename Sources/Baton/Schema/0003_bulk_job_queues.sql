-- Work queues of the bulk jobs over baton.transfers (issue 7).
--
-- `baton transfer-ids` works on pending rows without a transfer identifier, `baton exchange` on pending rows
-- with one. Each claims rows in next_attempt_at order (never-tried first) with FOR UPDATE SKIP LOCKED and a
-- lease; these partial indexes keep both claims an index scan over the rows still to do.
CREATE INDEX transfers_exchange_queue_idx ON baton.transfers (next_attempt_at NULLS FIRST, old_sub)
    WHERE state = 'pending' AND transfer_sub IS NOT NULL;
CREATE INDEX transfers_sender_queue_idx ON baton.transfers (next_attempt_at NULLS FIRST, old_sub)
    WHERE state = 'pending' AND transfer_sub IS NULL;
