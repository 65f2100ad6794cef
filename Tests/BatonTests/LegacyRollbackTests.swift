import Baton
import BatonPostgres
import Foundation
import TestSupport
import Testing

/// An identity table shared by providers with a JSON copy of the claims, the email in the users table, and a further
/// copy of it (allauth's shape, the one every framework has): what `baton rollback` must put back, byte for byte.
private struct RollbackFixture {
    let url: String
    let pool: PostgresPool
    let store: LegacyStore

    static let old1 = "a1@privaterelay.appleid.com", new1 = "b1@privaterelay.appleid.com"
    static let old2 = "a2@privaterelay.appleid.com", new2 = "b2@privaterelay.appleid.com"

    init(_ name: String) async throws {
        url = try TestDatabase.create(name)
        pool = PostgresPool(url: url, maxConnections: 2, acquireTimeout: .seconds(30))
        _ = try await BatonSchema.migrator().migrate(pool)
        try await pool.withConnection { connection in
            try await connection.executeScript(unsafeSQL: """
                CREATE TABLE public.users (id integer PRIMARY KEY, email text UNIQUE, name text);
                CREATE TABLE public.identity (id bigint PRIMARY KEY, provider text NOT NULL, uid text NOT NULL,
                    user_id integer NOT NULL REFERENCES public.users (id), extra_data jsonb, UNIQUE (provider, uid));
                CREATE TABLE public.emailaddress (id serial PRIMARY KEY, user_id integer NOT NULL REFERENCES public.users (id),
                    email text NOT NULL, verified boolean NOT NULL);
                INSERT INTO public.users VALUES (1, '\(Self.old1)', 'one'), (2, '\(Self.old2)', 'two'), (3, 'g@example.org', 'three');
                INSERT INTO public.identity VALUES
                    (11, 'apple', 'old.1', 1, '{"sub": "old.1", "email": "\(Self.old1)", "is_private_email": true}'),
                    (12, 'apple', 'old.2', 2, '{"sub": "old.2", "email": "\(Self.old2)"}'),
                    (13, 'google', 'old.1', 1, '{"sub": "old.1", "email": "\(Self.old1)"}'),
                    (14, 'google', 'g.3', 3, NULL);
                INSERT INTO public.emailaddress (user_id, email, verified) VALUES
                    (1, '\(Self.old1)', true), (1, 'me@example.com', true), (2, '\(Self.old2)', true), (3, '\(Self.old1)', false);
                INSERT INTO baton.transfers (old_sub, transfer_sub) VALUES ('old.1', 't.1'), ('old.2', 't.2');
                """)
        }
        let legacy = BatonConfiguration.Legacy(
            table: "public.identity", keyColumn: "id", subjectColumn: "uid", emailColumn: nil, filters: ["provider": "apple"],
            email: LegacyEmailTable(table: "public.users", column: "email", keyColumn: "id", referenceColumn: "user_id"),
            json: LegacyJSONCopy(column: "extra_data", subjectKeys: ["sub"], emailKeys: ["email"]),
            emailCopies: [LegacyEmailCopy(table: "public.emailaddress", column: "email", userColumn: "user_id")])
        store = LegacyStore(pool: pool, legacy: try legacy.identifiers())
    }

    static func run(_ name: String, _ body: (RollbackFixture) async throws -> Void) async throws {
        let fixture = try await RollbackFixture(name)
        try await withTeardown(fixture, teardown: { await $0.pool.close() }, body)
    }

    /// Every row of the application's three tables, every column, as PostgreSQL prints it.
    func tables() throws -> String {
        try TestDatabase.psql(url, """
            SELECT string_agg(r, E'\\n' ORDER BY r) FROM (
                SELECT 'u ' || u::text AS r FROM public.users u UNION ALL SELECT 'i ' || i::text FROM public.identity i
                UNION ALL SELECT 'e ' || e::text FROM public.emailaddress e) AS rows
            """)
    }

    func value(_ sql: String) throws -> String { try TestDatabase.psql(url, sql) }

    func migrate(_ n: Int, email: String) async throws {
        let outcome = try await store.applyMigration(oldSub: "old.\(n)", newSub: "new.\(n)", newEmail: email, isPrivateEmail: true,
                                                     transferSub: "t.\(n)", method: .exchange)
        guard case .migrated = outcome else { throw TestSupportError("user \(n) did not migrate: \(outcome)") }
    }
}

@Suite("baton rollback: migrations reversed from the audit trail, for an identity table with every copy")
struct LegacyRollbackTests {
    @Test("a migration rolled back puts every table back byte for byte, reopens the transfer row, and is recorded once")
    func rollBackOne() async throws {
        try await RollbackFixture.run("rollback_one") { f in
            let before = try f.tables()
            try await f.migrate(1, email: RollbackFixture.new1)
            let migrated = try f.tables()
            #expect(migrated != before)
            #expect(migrated.contains(RollbackFixture.new1) && migrated.contains("new.1"))
            let found = try await f.store.migrations(legacyKey: "11", since: nil)
            #expect(found.count == 1 && found.first?.newSub == "new.1" && found.first?.oldSub == "old.1")
            let migration = try #require(found.first)
            #expect(try await f.store.rollBack(migration) == .rolledBack)
            #expect(try f.tables() == before)
            #expect(try f.value("SELECT state || ' ' || coalesce(new_sub, '-') || ' ' || coalesce(method, '-') FROM baton.transfers WHERE old_sub = 'old.1'")
                    == "pending - -")
            #expect(try f.value("""
                SELECT concat_ws(' ', legacy_key, old_sub, new_sub, old_email, new_email, detail->>'event', detail->>'transfers_reopened')
                FROM baton.events WHERE kind = 'rolled_back'
                """) == "11 new.1 old.1 \(RollbackFixture.new1) \(RollbackFixture.old1) \(migration.eventID) 1")
            // Once: found no more, and refused when asked again.
            #expect(try await f.store.migrations(legacyKey: "11", since: nil).isEmpty)
            #expect(try await f.store.rollBack(migration) == .refused(reason: "already rolled back"))
            // Migrated again afterwards, as the exchange would.
            try await f.migrate(1, email: RollbackFixture.new1)
            #expect(try f.tables() == migrated)
        }
    }

    @Test("a record changed since its migration is refused and left as it is; the others since the moment are rolled back")
    func refusesChangedRows() async throws {
        try await RollbackFixture.run("rollback_changed") { f in
            let before = try f.tables()
            let start = Date().addingTimeInterval(-1)
            try await f.migrate(1, email: RollbackFixture.new1)
            try await f.migrate(2, email: RollbackFixture.new2)
            // User 2 gives the application an address of their own after the migration.
            _ = try f.value("UPDATE public.users SET email = 'mine@example.org' WHERE id = 2")
            let changed = try f.tables()
            let found = try await f.store.migrations(legacyKey: nil, since: start)
            #expect(found.map(\.legacyKey) == ["12", "11"])
            var outcomes: [RollbackOutcome] = []
            for migration in found { outcomes.append(try await f.store.rollBack(migration)) }
            #expect(outcomes == [.refused(reason: "its email changed since the migration"), .rolledBack])
            // User 1 is back as before; user 2 is exactly as it was after the change.
            let rows = try f.tables().split(separator: "\n")
            let beforeRows = before.split(separator: "\n"), changedRows = changed.split(separator: "\n")
            for row in rows where row.contains("(1,") || row.contains("(11,") || row.contains("(13,") { #expect(beforeRows.contains(row), "\(row)") }
            for row in rows where row.contains("(2,") || row.contains("(12,") { #expect(changedRows.contains(row), "\(row)") }
            #expect(try f.value("SELECT string_agg(old_sub || ':' || state, ' ' ORDER BY old_sub) FROM baton.transfers") == "old.1:pending old.2:migrated")
            // Nothing after the moment: nothing found.
            #expect(try await f.store.migrations(legacyKey: nil, since: Date().addingTimeInterval(60)).isEmpty)
        }
    }
}
