-- A sign-in's writes that another sign-in could see are recorded with the attempt that made them.
--
-- When the connection breaks after a statement was sent, its commit is unknown, and the sign-in's driver performs
-- the same step again (the async pool retrying, or taking over from the event loop's pipeline). A nonce or a link
-- session that the first performance did use up would then look used by someone else, and the user's one sign-in
-- would be refused as a replay. Each attempt (one request; its identifier random, made by Baton, never the
-- caller's) is stored beside what it consumed, so its repeated statement recognises its own write, while a replay
-- of the same token, another attempt, is still refused.
ALTER TABLE baton.nonces ADD COLUMN attempt text;
ALTER TABLE baton.link_sessions ADD COLUMN used_by text;
