-- Sign-in support: single-use nonces and the lookups the sign-in hot path needs.

-- A nonce presented with an identity token is accepted once until the token expires.
CREATE TABLE baton.nonces (
    nonce       text PRIMARY KEY,
    expires_at  timestamptz NOT NULL
);
CREATE INDEX nonces_expires_at_idx ON baton.nonces (expires_at);

-- Events of one legacy record, for tracing and reversing its rewrites.
CREATE INDEX events_legacy_key_idx ON baton.events (legacy_key);
