-- Hardening: nonces are scoped per subject, and notifications are applied in event order.

-- A nonce is consumed per `sub`: one person's nonce never blocks another's, and a replay is matched on both.
ALTER TABLE baton.nonces ADD COLUMN sub text NOT NULL DEFAULT '';
ALTER TABLE baton.nonces DROP CONSTRAINT nonces_pkey;
ALTER TABLE baton.nonces ADD PRIMARY KEY (sub, nonce);

-- The `event_time` of the latest server-to-server notification (or sign-in that restored consent) applied to
-- a subject: an older event arriving late, or replayed, is ignored.
ALTER TABLE baton.subjects ADD COLUMN event_time timestamptz;
