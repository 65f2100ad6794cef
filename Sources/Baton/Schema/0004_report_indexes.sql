-- The report's list of unresolved users is paged by old_sub over the rows not yet migrated; late in
-- the window those are a small share of the table, so a partial index keeps each page cheap.
CREATE INDEX transfers_unresolved_idx ON baton.transfers (old_sub) WHERE state <> 'migrated';
