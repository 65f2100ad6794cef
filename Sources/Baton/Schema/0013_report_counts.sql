-- The report's counts kept as rows change (issue 30): counting every row of baton.transfers took the report
-- some 2 s a million rows. Each statement that writes baton.transfers appends what it changed, counted by
-- group, to baton.transfer_count_deltas (a statement trigger over its transition tables: one row per group per
-- statement, never an update, so concurrent migrations contend on no row). The report folds the deltas into
-- baton.transfer_counts now and then and reads both through baton.transfer_count_totals: a few thousand rows
-- whatever the number of users.
--
-- A group is a state and method, with the UTC hour of migrated_at for migrated rows (the per-day counts and the
-- pace read whole hours from here, the hours at their edges from the index of 0012) and, for the rows the
-- failure reasons count, their reason as the report shows it.
CREATE TABLE baton.transfer_counts (
    state         text NOT NULL,
    method        text,
    migrated_hour timestamptz,
    reason        text,
    count         bigint NOT NULL
);
CREATE TABLE baton.transfer_count_deltas (LIKE baton.transfer_counts);

-- The counts in every snapshot: summary and deltas added up, groups that came to zero left out.
CREATE VIEW baton.transfer_count_totals AS
SELECT state, method, migrated_hour, reason, sum(count)::bigint AS count
FROM (SELECT * FROM baton.transfer_counts UNION ALL SELECT * FROM baton.transfer_count_deltas) AS counted
GROUP BY state, method, migrated_hour, reason
HAVING sum(count) <> 0;

-- A row's hour and reason in its group (written once: the trigger, the seeding below and nothing else use them).
CREATE FUNCTION baton.transfer_count_hour(state text, migrated_at timestamptz) RETURNS timestamptz
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN state = 'migrated' THEN date_trunc('hour', migrated_at AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' END
$$;
CREATE FUNCTION baton.transfer_count_reason(state text, last_error text) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN state IN ('failed', 'unresolvable') THEN COALESCE(left(last_error, 200), 'no error recorded')
                WHEN state = 'pending' THEN left(last_error, 200) END
$$;

-- Appends the statement's changes by group: +1 for each new row version, -1 for each old one, rows of one group
-- added up; groups whose changes cancel out (a lease taken or released, an attempt counted) append nothing.
CREATE FUNCTION baton.record_transfer_count_deltas() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO baton.transfer_count_deltas
        SELECT state, method, baton.transfer_count_hour(state, migrated_at), baton.transfer_count_reason(state, last_error), count(*)
        FROM new_rows GROUP BY 1, 2, 3, 4;
    ELSIF TG_OP = 'DELETE' THEN
        INSERT INTO baton.transfer_count_deltas
        SELECT state, method, baton.transfer_count_hour(state, migrated_at), baton.transfer_count_reason(state, last_error), -count(*)
        FROM old_rows GROUP BY 1, 2, 3, 4;
    ELSE
        INSERT INTO baton.transfer_count_deltas
        SELECT state, method, baton.transfer_count_hour(state, migrated_at), baton.transfer_count_reason(state, last_error), sum(change)
        FROM (SELECT state, method, migrated_at, last_error, 1 AS change FROM new_rows
              UNION ALL
              SELECT state, method, migrated_at, last_error, -1 FROM old_rows) AS changes
        GROUP BY 1, 2, 3, 4
        HAVING sum(change) <> 0;
    END IF;
    RETURN NULL;
END
$$;
CREATE TRIGGER transfers_count_inserts AFTER INSERT ON baton.transfers REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION baton.record_transfer_count_deltas();
CREATE TRIGGER transfers_count_updates AFTER UPDATE ON baton.transfers REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION baton.record_transfer_count_deltas();
CREATE TRIGGER transfers_count_deletes AFTER DELETE ON baton.transfers REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION baton.record_transfer_count_deltas();

-- TRUNCATE fires no delete trigger: it empties the counts too.
CREATE FUNCTION baton.clear_transfer_counts() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM baton.transfer_count_deltas;
    DELETE FROM baton.transfer_counts;
    RETURN NULL;
END
$$;
CREATE TRIGGER transfers_count_truncates AFTER TRUNCATE ON baton.transfers
    FOR EACH STATEMENT EXECUTE FUNCTION baton.clear_transfer_counts();

-- The rows already there (the migration's transaction holds the lock CREATE TRIGGER took, so no write comes
-- between the triggers and this count).
INSERT INTO baton.transfer_counts
SELECT state, method, baton.transfer_count_hour(state, migrated_at), baton.transfer_count_reason(state, last_error), count(*)
FROM baton.transfers GROUP BY 1, 2, 3, 4;
