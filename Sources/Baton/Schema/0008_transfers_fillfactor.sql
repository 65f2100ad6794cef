-- Room on each page of baton.transfers for the rows' next versions (pages written from now on).
--
-- A bulk job leases every row it works on (lease_owner, lease_expires_at, updated_at: no index covers them), so
-- the lease can be a heap-only update that writes none of the table's eleven indexes, but only when the row's
-- page has room for the new version; rows loaded page-full (the default fillfactor, 100) left none, and each
-- lease wrote a new entry into every index. Existing pages keep their rows until VACUUM FULL or CLUSTER
-- rewrites them; new rows (the seeding of `baton exchange` and `baton transfer-ids`, `baton import transfers`) get the room.
ALTER TABLE baton.transfers SET (fillfactor = 70);
