-- The report at ten million users (issue 30): each figure read from a narrow index, not the tables' heap.
--
-- The totals by state and method, the migrations per day and method, and the pace (migrations in a recent period)
-- from one index: an index-only scan of the state, time and method of every row instead of two scans of the
-- table's heap (0001's transfers_migrated_at_idx held the time only, so the day counts read each migrated row).
DROP INDEX baton.transfers_migrated_at_idx;
CREATE INDEX transfers_state_migrated_at_idx ON baton.transfers (state, migrated_at) INCLUDE (method);
-- The failure reasons group the failed, unresolvable and retried rows: a partial index over those rows alone.
CREATE INDEX transfers_failures_idx ON baton.transfers (state)
    WHERE state IN ('failed', 'unresolvable') OR (state = 'pending' AND last_error IS NOT NULL);
-- Unmatched sign-ins are counted over the events of kind 'unmatched' only, with their transfer identifier in the
-- index: a few entries, only for those events, however long baton.events grows.
CREATE INDEX events_unmatched_idx ON baton.events (transfer_sub) WHERE kind = 'unmatched';
