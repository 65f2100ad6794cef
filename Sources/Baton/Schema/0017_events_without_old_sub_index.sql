-- The audit trail's index on old_sub, which nothing reads (issue 42).
--
-- Every event (a migration, a rollback, an unmatched sign-in, an email conflict) wrote an entry into
-- events_old_sub_idx (0001): 89 bytes a user at 20,000 users right after a whole transfer (scripts/footprint.sh,
-- docs/scaling.md "Footprint in the application's database"), 0 scans during the jobs. No statement of Baton's
-- filters or joins baton.events on old_sub: `baton rollback` finds its events by kind, time, legacy_key and id
-- (events_kind_at_idx, events_legacy_key_idx, events_pkey), the link flow by new_sub (events_new_sub_idx), the
-- report by kind (events_kind_at_idx). The column stays: it is the audit trail's record of the old subject, and
-- rollback writes it back.
DROP INDEX baton.events_old_sub_idx;
