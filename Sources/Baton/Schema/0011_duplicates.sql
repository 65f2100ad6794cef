-- Duplicates: a second record of the application's table under the receiving team's identifier beside the
-- user's legacy record, made when a sign-in reached the application without going through Baton after the
-- transfer (Baton deployed late, or a login path that bypasses it). One row per (fresh record, legacy
-- record), written once by whichever path meets the pair first (a sign-in, the bulk exchange, a re-link).
-- Keys are text, as baton.transfers.legacy_key is.
CREATE TABLE baton.duplicates (
    fresh_key         text NOT NULL,
    legacy_key        text NOT NULL,
    new_sub           text NOT NULL,
    old_sub           text,
    transfer_sub      text,
    found_by          text NOT NULL CHECK (found_by IN ('signin', 'exchange', 'link')),
    -- The fresh record's creation time, from legacy.created_at_column when the configuration names one.
    fresh_created_at  timestamptz,
    found_at          timestamptz NOT NULL DEFAULT now(),
    -- When `baton merge` (or legacy.on_duplicate = merge) moved the Apple identity onto the legacy record.
    merged_at         timestamptz,
    PRIMARY KEY (fresh_key, legacy_key),
    CHECK (fresh_key <> legacy_key)
);
CREATE INDEX duplicates_unmerged_idx ON baton.duplicates (found_at) WHERE merged_at IS NULL;
