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
            try await f.store.createLinkSession(nonceHash: "h-1", expiresAt: now.addingTimeInterval(600))
            try crossing(f, "UPDATE", column)
            await #expect(throws: BatonError(.inconsistentDatabaseAnswer)) {
                try await f.store.consumeLinkSession(nonceHash: "h-1", attempt: "link-1", now: now)
            }
        }
    }
}
