-- The report at scale (issue 30): its totals by state and method, its migrations per day and method and its pace
-- (migrations in a recent period) from one narrow index, an index-only scan of each row's state, time and method,
-- instead of two scans of the table's heap (0001's transfers_migrated_at_idx held the time only, so the day
-- counts read every migrated row). At a million rows: 50,000 pages read per figure before, 6,500 after.
DROP INDEX baton.transfers_migrated_at_idx;
CREATE INDEX transfers_state_migrated_at_idx ON baton.transfers (state, migrated_at) INCLUDE (method);
