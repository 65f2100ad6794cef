-- A link session is recorded with the request that opened it.
--
-- When the connection breaks after the INSERT of POST /v1/link/session was sent, its commit is unknown, and the
-- request sends it again. The session's nonce is random, so a row already holding its hash is the first send's,
-- committed: the repeat finds it by its creator (the request's attempt, a random identifier Baton makes) and
-- answers it, instead of failing on the primary key.
ALTER TABLE baton.link_sessions ADD COLUMN created_by text;
