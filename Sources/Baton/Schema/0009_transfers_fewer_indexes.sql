-- Fewer index entries per write to baton.transfers.
--
-- Every row seeded, every transfer identifier stored and every migration writes an entry into each index of
-- baton.transfers whose predicate the new row version meets (a change of transfer_sub, state or new_sub is never a
-- heap-only update). Two indexes were never scanned: transfers_pending_idx (0001; the job queues claim through
-- the narrower transfers_exchange_queue_idx and transfers_sender_queue_idx of 0003, and nothing else filters on
-- pending rows alone) and transfers_no_transfer_sub_idx (0001; the sender's queue has its own index since 0003).
-- transfers_legacy_key_idx held an entry for every row, though only rows imported as key,transfer_sub or migrated
-- have a key; it is looked up by equality only (a join to the importer's rows), which implies IS NOT NULL.
DROP INDEX baton.transfers_pending_idx;
DROP INDEX baton.transfers_no_transfer_sub_idx;
DROP INDEX baton.transfers_legacy_key_idx;
CREATE INDEX transfers_legacy_key_idx ON baton.transfers (legacy_key) WHERE legacy_key IS NOT NULL;
