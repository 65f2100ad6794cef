import Baton
import BatonJobs
import BatonAppleSignIn
import BatonPostgres
import Foundation
import TestSupport
import Testing

/// `public.accounts`: a users table with a creation time and a column Baton never names, holding a legacy
/// record (`old.1`, the sending team's relay address, transfer identifier `t.1`), the fresh record a sign-in
/// that bypassed Baton made (`new.1`, the receiving team's relay address) and a bystander.
private struct DuplicateFixture {
    let url: String
    let pool: PostgresPool
    let store: LegacyStore

    static let legacyEmail = "old@privaterelay.appleid.com"
    static let freshEmail = "new@privaterelay.appleid.com"

    init(_ name: String, subjectNotNull: Bool = false, uniqueEmail: Bool = false, policy: DuplicatePolicy? = nil, poolSize: Int = 4) async throws {
        url = try TestDatabase.create(name)
        pool = PostgresPool(url: url, maxConnections: poolSize, acquireTimeout: .seconds(30))
        _ = try await BatonSchema.migrator().migrate(pool)
        try await pool.withConnection { connection in
            try await connection.executeScript(unsafeSQL: """
                CREATE TABLE public.accounts (id bigint PRIMARY KEY, apple_sub text \(subjectNotNull ? "NOT NULL" : "") UNIQUE,
                    email text \(uniqueEmail ? "UNIQUE" : ""), transfer_sub text, nickname text, created timestamptz NOT NULL);
                INSERT INTO public.accounts VALUES
                    (1, 'old.1', '\(Self.legacyEmail)', 't.1', 'real one', '2024-03-01T10:00:00Z'),
                    (2, 'new.1', '\(Self.freshEmail)', NULL, 'second one', '2026-11-02T09:30:00Z'),
                    (3, 'old.3', 'bystander@example.org', 't.3', 'bystander', '2024-03-02T10:00:00Z');
                INSERT INTO baton.transfers (old_sub, transfer_sub) VALUES ('old.1', 't.1'), ('old.3', 't.3');
                """)
        }
        let legacy = BatonConfiguration.Legacy(table: "public.accounts", keyColumn: "id", subjectColumn: "apple_sub", emailColumn: "email",
                                               transferColumn: "transfer_sub", onDuplicate: policy, createdAtColumn: "created")
        store = LegacyStore(pool: pool, legacy: try legacy.identifiers())
    }

    static func run(_ name: String, subjectNotNull: Bool = false, uniqueEmail: Bool = false, policy: DuplicatePolicy? = nil,
                    _ body: (DuplicateFixture) async throws -> Void) async throws {
        let fixture = try await DuplicateFixture(name, subjectNotNull: subjectNotNull, uniqueEmail: uniqueEmail, policy: policy)
        try await withTeardown(fixture, teardown: { await $0.pool.close() }, body)
    }

    /// Every row of `public.accounts`, every column, as PostgreSQL prints it (read through psql).
    func rows() throws -> String {
        try TestDatabase.psql(url, "SELECT string_agg(a::text, E'\\n' ORDER BY id) FROM public.accounts AS a")
    }

    func value(_ sql: String) throws -> String { try TestDatabase.psql(url, sql) }
    func count(_ sql: String) throws -> Int { Int(try value(sql)) ?? -1 }

    /// The exchange of the legacy user: Apple answers with the identifier the fresh record already holds.
    func exchange() async throws -> BulkStepOutcome {
        try await store.applyExchange(oldSub: "old.1", transferSub: "t.1",
                                      user: ExchangedUser(sub: "new.1", email: DuplicateFixture.freshEmail, isPrivateEmail: true))
    }
}

@Suite("Duplicates: a second record under the new identifier, recorded once and merged onto the legacy record")
struct LegacyDuplicatesTests {
    static let pair = DuplicatePair(freshKey: "2", legacyKey: "1")

    @Test("report (the default): the exchange's conflict records the pair once, whichever path meets it; nothing moves")
    func recordOnce() async throws {
        try await DuplicateFixture.run("dup_record") { f in
            let before = try f.rows()
            guard case .unresolvable(let reason) = try await f.exchange() else { Issue.record("the exchange must not succeed"); return }
            #expect(reason.contains("baton merge"), "\(reason)")
            let recorded = try await f.store.recordDuplicate(newSub: "new.1", oldSub: nil, transferSub: "t.1", foundBy: .signin)
            #expect(recorded?.pair == Self.pair && recorded?.isNew == false && recorded?.isUnmerged == true)
            let listed = try await f.store.duplicates()
            #expect(listed.count == 1)
            #expect(listed.first?.pair == Self.pair && listed.first?.foundBy == .exchange && listed.first?.oldSub == "old.1")
            #expect(listed.first?.transferSub == "t.1" && listed.first?.newSub == "new.1" && listed.first?.mergedAt == nil)
            #expect(listed.first?.freshCreatedAt == ISO8601DateFormatter().date(from: "2026-11-02T09:30:00Z"))
            #expect(try f.rows() == before)
            // No pair: an unknown identifier, or the legacy record already carrying it.
            #expect(try await f.store.recordDuplicate(newSub: "new.9", oldSub: "old.1", transferSub: nil, foundBy: .link) == nil)
            #expect(try await f.store.recordDuplicate(newSub: "old.3", oldSub: "old.3", transferSub: nil, foundBy: .link) == nil)
            #expect(try f.count("SELECT count(*) FROM baton.duplicates") == 1)
        }
    }

    @Test("a record Baton migrated is never the fresh half of a pair: a refused link records nothing, and a pair recorded before cannot be merged")
    func migratedIsNeverFresh() async throws {
        try await DuplicateFixture.run("dup_migrated", policy: .merge) { f in
            // The bystander migrates by signing in: record 3 now holds new.3, written by Baton.
            let migrated = try await f.store.applyMigration(transferSub: "t.3", newSub: "new.3", newEmail: nil, isPrivateEmail: nil, method: .signin)
            #expect(migrated == .migrated(LegacyUser(key: "3", subject: "new.3", email: "bystander@example.org")))
            let before = try f.rows()
            // A link of the legacy record 1 to new.3 (someone holding both tokens) conflicts: no pair, nothing merged.
            #expect(try await f.store.recordDuplicate(newSub: "new.3", oldSub: "old.1", transferSub: nil, foundBy: .link) == nil)
            #expect(try await f.store.recordDuplicate(newSub: "new.3", oldSub: nil, transferSub: "t.1", foundBy: .signin) == nil)
            #expect(try f.count("SELECT count(*) FROM baton.duplicates") == 0)
            // A pair an earlier version recorded is refused by the merge itself.
            try await f.pool.execute("""
                INSERT INTO baton.duplicates (fresh_key, legacy_key, new_sub, old_sub, found_by) VALUES ('3', '1', 'new.3', 'old.1', 'link')
                """)
            #expect(try await f.store.mergeDuplicate(DuplicatePair(freshKey: "3", legacyKey: "1")) == nil)
            #expect(try await f.store.mergeDuplicates().isEmpty)
            #expect(try f.rows() == before)
            #expect(try await f.store.lookupBySubject("new.3")?.key == "3")
        }
    }

    @Test("merge: the legacy record takes the identifier and email, the fresh one's subject becomes NULL, nothing else changes")
    func merge() async throws {
        try await DuplicateFixture.run("dup_merge") { f in
            _ = try await f.exchange()
            let merged = try await f.store.mergeDuplicate(Self.pair)
            #expect(merged?.user == LegacyUser(key: "1", subject: "new.1", email: DuplicateFixture.freshEmail))
            #expect(merged?.freshKey == "2" && merged?.releasedSubject == nil && merged?.sameAccount == false)
            #expect(try f.rows() == """
                (1,new.1,\(DuplicateFixture.freshEmail),t.1,"real one","2024-03-01 10:00:00+00")
                (2,,\(DuplicateFixture.freshEmail),,"second one","2026-11-02 09:30:00+00")
                (3,old.3,bystander@example.org,t.3,bystander,"2024-03-02 10:00:00+00")
                """)
            #expect(try f.value("SELECT state || ' ' || method || ' ' || new_sub || ' ' || legacy_key FROM baton.transfers WHERE old_sub = 'old.1'")
                    == "migrated exchange new.1 1")
            #expect(try f.value("SELECT old_sub || ' ' || old_email || ' ' || new_email FROM baton.events WHERE kind = 'migrated'")
                    == "old.1 \(DuplicateFixture.legacyEmail) \(DuplicateFixture.freshEmail)")
            #expect(try f.value("""
                SELECT legacy_key || ' ' || (detail->>'fresh_key') || ' ' || (detail->>'fresh_subject') || ' ' || coalesce(detail->>'released_subject', 'NULL')
                FROM baton.events WHERE kind = 'duplicate_merged'
                """) == "1 2 new.1 NULL")
            #expect(try f.count("SELECT count(*) FROM baton.duplicates WHERE merged_at IS NOT NULL") == 1)
            // The merge's own event holds every old value: both keys, both subjects, both emails.
            #expect(try f.value("""
                SELECT concat_ws(' ', legacy_key, detail->>'fresh_key', old_sub, new_sub, old_email, new_email, detail->>'fresh_email')
                FROM baton.events WHERE kind = 'duplicate_merged'
                """) == "1 2 old.1 new.1 \(DuplicateFixture.legacyEmail) \(DuplicateFixture.freshEmail) \(DuplicateFixture.freshEmail)")
            // Once merged: merged again (an answer lost) it answers the same merge and writes nothing; the pair is not found again.
            #expect(try await f.store.mergeDuplicate(Self.pair) == merged)
            #expect(try f.count("SELECT count(*) FROM baton.events WHERE kind IN ('migrated', 'duplicate_merged')") == 2)
            #expect(try await f.store.mergeDuplicates().isEmpty)
            #expect(try await f.store.recordDuplicate(newSub: "new.1", oldSub: nil, transferSub: "t.1", foundBy: .signin) == nil)
            #expect(try await f.store.lookupBySubject("new.1")?.key == "1")
        }
    }

    @Test("a NOT NULL subject column gets the marker; a unique email the fresh record holds stays, with email_conflict")
    func notNullAndUniqueEmail() async throws {
        try await DuplicateFixture.run("dup_notnull", subjectNotNull: true, uniqueEmail: true) { f in
            _ = try await f.exchange()
            let merged = try await f.store.mergeDuplicate(Self.pair)
            #expect(merged?.user == LegacyUser(key: "1", subject: "new.1", email: DuplicateFixture.legacyEmail))
            #expect(merged?.releasedSubject == "baton-released:new.1")
            #expect(try f.rows() == """
                (1,new.1,\(DuplicateFixture.legacyEmail),t.1,"real one","2024-03-01 10:00:00+00")
                (2,baton-released:new.1,\(DuplicateFixture.freshEmail),,"second one","2026-11-02 09:30:00+00")
                (3,old.3,bystander@example.org,t.3,bystander,"2024-03-02 10:00:00+00")
                """)
            #expect(try f.count("SELECT count(*) FROM baton.events WHERE kind = 'email_conflict' AND new_email = '\(DuplicateFixture.freshEmail)'") == 1)
        }
    }

    @Test("on_duplicate merge: the exchange merges the pair at once")
    func mergeOnExchange() async throws {
        try await DuplicateFixture.run("dup_policy", policy: .merge) { f async throws in
            #expect(try await f.exchange() == .done)
            #expect(try await f.store.lookupBySubject("new.1")?.key == "1")
            #expect(try f.count("SELECT count(*) FROM baton.duplicates WHERE found_by = 'exchange' AND merged_at IS NOT NULL") == 1)
        }
    }

    @Test("a pair whose fresh record changed since it was found is left alone; concurrent merges merge once")
    func staleAndConcurrent() async throws {
        try await DuplicateFixture.run("dup_race") { f in
            _ = try await f.exchange()
            _ = try f.value("UPDATE public.accounts SET apple_sub = 'new.2' WHERE id = 2")
            let before = try f.rows()
            #expect(try await f.store.mergeDuplicate(Self.pair) == nil)
            #expect(try f.rows() == before)
            #expect(try f.count("SELECT count(*) FROM baton.events WHERE kind IN ('migrated', 'duplicate_merged')") == 0)
            _ = try f.value("UPDATE public.accounts SET apple_sub = 'new.1' WHERE id = 2")
            let store = f.store
            let merges = try await withThrowingTaskGroup(of: MergedDuplicate?.self) { group in
                for _ in 0..<4 { group.addTask { try await store.mergeDuplicate(Self.pair) } }
                return try await group.reduce(into: []) { $0.append($1) }
            }
            #expect(merges.count == 4 && merges.allSatisfy { $0?.user.key == "1" && $0?.freshKey == "2" })
            #expect(try f.count("SELECT count(*) FROM baton.events WHERE kind = 'duplicate_merged'") == 1)
            #expect(try f.count("SELECT count(*) FROM baton.events WHERE kind = 'migrated'") == 1)
        }
    }

    @Test("between companies: the legacy record has no subject, the pair is found and merged through the transfer identifier")
    func betweenCompanies() async throws {
        try await DuplicateFixture.run("dup_xco") { f in
            _ = try f.value("UPDATE public.accounts SET apple_sub = NULL WHERE id = 1; DELETE FROM baton.transfers WHERE old_sub = 'old.1'")
            let recorded = try await f.store.recordDuplicate(newSub: "new.1", oldSub: nil, transferSub: "t.1", foundBy: .signin)
            #expect(recorded?.pair == Self.pair && recorded?.isNew == true && recorded?.isUnmerged == true)
            #expect(try await f.store.mergeDuplicates().map(\.user.key) == ["1"])
            #expect(try f.value("SELECT string_agg(id || ':' || coalesce(apple_sub, 'NULL'), ' ' ORDER BY id) FROM public.accounts") == "1:new.1 2:NULL 3:old.3")
            #expect(try f.value("SELECT state || ' ' || method FROM baton.transfers WHERE transfer_sub = 't.1'") == "migrated signin")
        }
    }
}
