-- Baton's own tables. The application's user table is never created or altered here.

-- One row per user to migrate: the sender team's identifier, its transfer identifier, and what the
-- recipient team's identifier turned out to be.
CREATE TABLE baton.transfers (
    old_sub           text PRIMARY KEY,
    transfer_sub      text UNIQUE,
    new_sub           text UNIQUE,
    new_email         text,
    is_private_email  boolean,
    state             text NOT NULL DEFAULT 'pending'
                      CHECK (state IN ('pending', 'migrated', 'failed', 'unresolvable')),
    method            text CHECK (method IN ('signin', 'exchange', 'link')),
    attempts          integer NOT NULL DEFAULT 0,
    last_error        text,
    created_at        timestamptz NOT NULL DEFAULT now(),
    updated_at        timestamptz NOT NULL DEFAULT now(),
    migrated_at       timestamptz,
    -- Worker leases: a row is taken with FOR UPDATE SKIP LOCKED and leased until lease_expires_at,
    -- so a dead worker's rows are taken over once the lease runs out.
    lease_owner       text,
    lease_expires_at  timestamptz,
    next_attempt_at   timestamptz,
    CHECK (state <> 'migrated' OR (new_sub IS NOT NULL AND method IS NOT NULL AND migrated_at IS NOT NULL))
);
CREATE INDEX transfers_pending_idx ON baton.transfers (next_attempt_at NULLS FIRST, old_sub) WHERE state = 'pending';
CREATE INDEX transfers_no_transfer_sub_idx ON baton.transfers (old_sub) WHERE transfer_sub IS NULL;
CREATE INDEX transfers_migrated_at_idx ON baton.transfers (migrated_at) WHERE state = 'migrated';

-- Append-only audit of every change Baton makes, with old and new values, so any rewrite can be
-- traced and reversed.
CREATE TABLE baton.events (
    id            bigserial PRIMARY KEY,
    at            timestamptz NOT NULL DEFAULT now(),
    kind          text NOT NULL,
    method        text,
    legacy_key    text,
    old_sub       text,
    new_sub       text,
    old_email     text,
    new_email     text,
    transfer_sub  text,
    detail        jsonb
);
CREATE INDEX events_old_sub_idx ON baton.events (old_sub);
CREATE INDEX events_new_sub_idx ON baton.events (new_sub);
CREATE INDEX events_kind_at_idx ON baton.events (kind, at);

CREATE FUNCTION baton.refuse_event_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'baton.events is append-only';
END
$$;
CREATE TRIGGER events_append_only BEFORE UPDATE OR DELETE ON baton.events
    FOR EACH ROW EXECUTE FUNCTION baton.refuse_event_change();

-- Credential state per identifier, from Apple's server-to-server notifications.
CREATE TABLE baton.subjects (
    sub            text PRIMARY KEY,
    state          text NOT NULL CHECK (state IN ('authorized', 'revoked', 'deleted')),
    email_enabled  boolean,
    updated_at     timestamptz NOT NULL DEFAULT now()
);
