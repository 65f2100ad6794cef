-- The report's list of unresolved users also shows rows known only by their transfer identifier (imported
-- as key,transfer_sub between companies): it is paged by COALESCE(old_sub, transfer_sub), which this partial
-- index keeps an index scan.
DROP INDEX baton.transfers_unresolved_idx;
CREATE INDEX transfers_unresolved_idx ON baton.transfers ((COALESCE(old_sub, transfer_sub))) WHERE state <> 'migrated';
