-- Transfers between companies (issue 15): the recipient never sees the sender's team-scoped identifiers, so a
-- baton.transfers row may know only the transfer identifier (and, once imported as `key,transfer_sub`, the
-- legacy row's key). old_sub becomes optional; a surrogate key identifies the row.
ALTER TABLE baton.transfers DROP CONSTRAINT transfers_pkey;
ALTER TABLE baton.transfers ALTER COLUMN old_sub DROP NOT NULL;
ALTER TABLE baton.transfers ADD COLUMN id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY;
-- Still one row per sending-team identifier (NULLs are distinct), and ON CONFLICT (old_sub) still infers it.
CREATE UNIQUE INDEX transfers_old_sub_key ON baton.transfers (old_sub);
-- The legacy row a cross-company import names by key, and the row a migration rewrote.
ALTER TABLE baton.transfers ADD COLUMN legacy_key text;
CREATE INDEX transfers_legacy_key_idx ON baton.transfers (legacy_key);
ALTER TABLE baton.transfers ADD CONSTRAINT transfers_identified CHECK (old_sub IS NOT NULL OR transfer_sub IS NOT NULL);
