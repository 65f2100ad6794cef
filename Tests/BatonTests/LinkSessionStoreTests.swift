import Baton
import Foundation
import BatonPostgres
import TestSupport
import Testing

@Suite("LegacyStore: link sessions on PostgreSQL", .serialized)
struct LinkSessionStoreTests {
    /// Makes a trigger of `event` on `baton.link_sessions` set `column` to another value: it stands for a crossed answer
    /// (a transaction-mode pooler handing over another client's result), the row answered not the one asked for.
    private func crossing(_ f: StoreFixture, _ event: String, _ column: String) throws {
        _ = try TestDatabase.psql(f.url, """
            CREATE FUNCTION crossed() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN NEW.\(column) := 'someone-else'; RETURN NEW; END $$;
            CREATE TRIGGER crossed BEFORE \(event) ON baton.link_sessions FOR EACH ROW EXECUTE FUNCTION crossed();
            """)
    }

    @Test("a link session's use is checked against its question: a row of another session or attempt is refused, never counted as live",
          arguments: ["nonce_hash", "used_by"])
    func consumeCrossed(column: String) async throws {
        try await StoreFixture.run("store_linksess_crossed") { f in
            let now = Date()
            #expect(try await f.store.createLinkSession(nonceHash: "h-1", expiresAt: now.addingTimeInterval(600), attempt: "open-1", now: now, maxLive: 10))
            try crossing(f, "UPDATE", column)
            await #expect(throws: BatonError(.inconsistentDatabaseAnswer)) {
                try await f.store.consumeLinkSession(nonceHash: "h-1", attempt: "link-1", now: now)
            }
        }
    }

    @Test("a link session's record is checked against its question: a row of another session or creator is refused",
          arguments: ["nonce_hash", "created_by"])
    func createCrossed(column: String) async throws {
        try await StoreFixture.run("store_linksess_created_crossed") { f in
            let now = Date()
            try crossing(f, "INSERT", column)
            await #expect(throws: BatonError(.inconsistentDatabaseAnswer)) {
                try await f.store.createLinkSession(nonceHash: "h-1", expiresAt: now.addingTimeInterval(600), attempt: "open-1", now: now, maxLive: 10)
            }
        }
    }

    @Test("recording a session again: the same attempt finds its own row, even at the limit; another attempt's row is refused")
    func createRepeated() async throws {
        try await StoreFixture.run("store_linksess_repeat") { f in
            let now = Date()
            let expiry = now.addingTimeInterval(600)
            let first = try await f.store.createLinkSession(nonceHash: "h-1", expiresAt: expiry, attempt: "open-1", now: now, maxLive: 1)
            #expect(first)
            #expect(try await f.store.createLinkSession(nonceHash: "h-1", expiresAt: expiry, attempt: "open-1", now: now, maxLive: 1))
            #expect(try f.count("SELECT count(*) FROM baton.link_sessions") == 1)
            await #expect(throws: BatonError(.inconsistentDatabaseAnswer)) {
                try await f.store.createLinkSession(nonceHash: "h-1", expiresAt: expiry, attempt: "open-2", now: now, maxLive: 10)
            }
        }
    }

    @Test("at the limit of live sessions nothing is recorded; sessions count until they expire, used or not; each record deletes up to 100 expired ones")
    func limitAndPurge() async throws {
        try await StoreFixture.run("store_linksess_limit") { f in
            let now = Date()
            let later = now.addingTimeInterval(601)
            for i in 1...3 {
                #expect(try await f.store.createLinkSession(nonceHash: "h-\(i)", expiresAt: now.addingTimeInterval(600), attempt: "open-\(i)", now: now, maxLive: 3))
            }
            #expect(try await f.store.consumeLinkSession(nonceHash: "h-1", attempt: "link-1", now: now))
            #expect(try await f.store.createLinkSession(nonceHash: "h-4", expiresAt: now.addingTimeInterval(600), attempt: "open-4", now: now, maxLive: 3) == false)
            #expect(try f.count("SELECT count(*) FROM baton.link_sessions") == 3)
            _ = try TestDatabase.psql(f.url, """
                INSERT INTO baton.link_sessions (nonce_hash, expires_at)
                SELECT 'expired-' || i, now() - interval '1 hour' FROM generate_series(1, 250) i
                """)
            // At `later` the three are expired too: 253 expired, 100 deleted per record.
            #expect(try await f.store.createLinkSession(nonceHash: "h-5", expiresAt: later.addingTimeInterval(600), attempt: "open-5", now: later, maxLive: 3))
            #expect(try f.count("SELECT count(*) FROM baton.link_sessions") == 154)
            #expect(try await f.store.createLinkSession(nonceHash: "h-6", expiresAt: later.addingTimeInterval(600), attempt: "open-6", now: later, maxLive: 3))
            #expect(try await f.store.createLinkSession(nonceHash: "h-7", expiresAt: later.addingTimeInterval(600), attempt: "open-7", now: later, maxLive: 3))
            #expect(try f.count("SELECT count(*) FROM baton.link_sessions") == 3)
            #expect(try f.count("SELECT count(*) FROM baton.link_sessions WHERE nonce_hash IN ('h-5', 'h-6', 'h-7')") == 3)
        }
    }
}
