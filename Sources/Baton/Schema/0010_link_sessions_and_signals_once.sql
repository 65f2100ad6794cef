-- Security, second review: re-links bound to a server-issued session, and sign-in signals recorded once.
--
-- A re-link (POST /v1/link) needs a link session Baton issued (POST /v1/link/session): a random nonce, kept here
-- only as its SHA-256, used up by the first link that presents it, whatever that link comes to. Both tokens of
-- the link must carry the session's nonce, so a legacy token captured from an earlier ceremony cannot be paired
-- with another session. Expiry is compared on the application's clock (the statements bind it), never now().
CREATE TABLE baton.link_sessions (
    nonce_hash  text PRIMARY KEY,
    expires_at  timestamptz NOT NULL,
    used_at     timestamptz
);
CREATE INDEX link_sessions_expires_at_idx ON baton.link_sessions (expires_at);

-- An `unmatched` sign-in (a transfer identifier that leads to no record) and a `subject_conflict` (the new
-- identifier already held by another record) are recorded once per subject and transfer identifier: a token
-- replayed in a loop no longer appends an event per request to the append-only baton.events.
CREATE TABLE baton.signals_once (
    kind          text NOT NULL,
    sub           text NOT NULL,
    transfer_sub  text NOT NULL,
    PRIMARY KEY (kind, sub, transfer_sub)
);
-- Signals recorded before this migration count once too.
INSERT INTO baton.signals_once (kind, sub, transfer_sub)
SELECT DISTINCT kind, new_sub, transfer_sub FROM baton.events
WHERE kind IN ('unmatched', 'subject_conflict') AND new_sub IS NOT NULL AND transfer_sub IS NOT NULL
ON CONFLICT DO NOTHING;
