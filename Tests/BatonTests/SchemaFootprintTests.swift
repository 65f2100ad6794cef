import Baton
import Foundation
import BatonPostgres
import TestSupport
import Testing

/// The indexes of schema `baton` after every migration, pinned: each one is written on every row version it covers
/// (docs/scaling.md "Footprint in the application's database" measures them per user), so adding one, or keeping
/// one nothing reads, is a decision this list makes visible.
@Suite("Schema footprint: the indexes of schema baton")
struct SchemaFootprintTests {
    @Test("after db migrate, schema baton holds exactly the indexes its statements read (0017 dropped events_old_sub_idx)")
    func indexes() async throws {
        try await StoreFixture.run("footprint") { f in
            let names = try TestDatabase.psql(f.url, """
                SELECT string_agg(tablename || '.' || indexname, ' ' ORDER BY tablename, indexname) FROM pg_indexes WHERE schemaname = 'baton'
                """).split(separator: " ").map(String.init)
            #expect(names == [
                "duplicates.duplicates_pkey", "duplicates.duplicates_unmerged_idx",
                "events.events_kind_at_idx", "events.events_legacy_key_idx", "events.events_new_sub_idx", "events.events_pkey",
                "link_sessions.link_sessions_expires_at_idx", "link_sessions.link_sessions_pkey",
                "nonces.nonces_expires_at_idx", "nonces.nonces_pkey",
                "schema_migrations.schema_migrations_pkey", "signals_once.signals_once_pkey", "subjects.subjects_pkey",
                "transfers.transfers_exchange_queue_idx", "transfers.transfers_legacy_key_idx", "transfers.transfers_new_sub_key",
                "transfers.transfers_old_sub_key", "transfers.transfers_pkey", "transfers.transfers_sender_queue_idx",
                "transfers.transfers_state_migrated_at_idx", "transfers.transfers_transfer_sub_key", "transfers.transfers_unresolved_idx",
            ])
            // The audit trail keeps the old subject: rollback writes it back.
            #expect(try f.count("SELECT count(*) FROM information_schema.columns WHERE table_schema = 'baton' AND table_name = 'events' AND column_name = 'old_sub'") == 1)
        }
    }
}
