import Baton
import BatonPostgres
import Foundation
import TestSupport
import Testing

/// A table keeping the subject inside JSON with no unique index (Logto's `users.identities`), a table copying it into a
/// JSON array of another table (Kratos' `identity_credentials.config`), and a second table holding it as a column
/// (SuperTokens' `thirdparty_user_to_tenant`).
private struct LocationsFixture {
    let url: String
    let pool: PostgresPool
    let store: LegacyStore

    static let legacy = BatonConfiguration.Legacy(
        table: "public.users", keyColumn: "id", subjectColumn: "identities", emailColumn: "primary_email",
        filters: ["tenant_id": "t1"], subjectPath: ["apple", "userId"],
        subjectCopies: [
            LegacySubjectCopy(column: "identities", path: ["apple", "details", "id"]),
            LegacySubjectCopy(column: "config", path: LegacyJSONPath([.key("providers"), .element(member: "provider", value: "apple"), .key("subject")]),
                              table: "public.credentials", keyColumn: "user_id"),
            LegacySubjectCopy(column: "third_party_user_id", table: "public.user_to_tenant", keyColumn: "user_id", filters: ["third_party_id": "apple"]),
        ])

    init(_ name: String, legacy: BatonConfiguration.Legacy = Self.legacy) async throws {
        url = try TestDatabase.create(name)
        pool = PostgresPool(url: url, maxConnections: 12, acquireTimeout: .seconds(30))
        _ = try await BatonSchema.migrator().migrate(pool)
        try await pool.withConnection { connection in
            try await connection.executeScript(unsafeSQL: """
                CREATE TABLE public.users (tenant_id varchar(21) NOT NULL, id varchar(12) NOT NULL, primary_email varchar(128),
                    identities jsonb NOT NULL DEFAULT '{}'::jsonb, PRIMARY KEY (id));
                CREATE TABLE public.credentials (id serial PRIMARY KEY, user_id varchar(12) NOT NULL, config jsonb NOT NULL);
                CREATE TABLE public.user_to_tenant (user_id varchar(12) NOT NULL, tenant_id text NOT NULL, third_party_id text NOT NULL,
                    third_party_user_id text NOT NULL, PRIMARY KEY (user_id, tenant_id));
                """)
        }
        store = LegacyStore(pool: pool, legacy: try legacy.identifiers())
    }

    /// User `id` of `tenant` whose Apple identity (and copies) hold `sub`, with a Google identity holding `google`.
    func user(_ id: String, tenant: String = "t1", apple sub: String?, google: String = "g.same") async throws {
        let apple = sub.map { "\"apple\": {\"userId\": \"\($0)\", \"details\": {\"id\": \"\($0)\", \"email\": \"a@privaterelay.appleid.com\"}}, " } ?? ""
        try await pool.withConnection { try await $0.executeScript(unsafeSQL: """
            INSERT INTO public.users VALUES ('\(tenant)', '\(id)', 'a@privaterelay.appleid.com',
                '{\(apple)"google": {"userId": "\(google)", "details": {"id": "\(google)"}}}');
            INSERT INTO public.credentials (user_id, config) VALUES ('\(id)',
                '{"providers": [{"provider": "google", "subject": "\(sub ?? "none")"}, {"provider": "apple", "subject": "\(sub ?? "none")", "x": 1}], "v": 2}');
            INSERT INTO public.user_to_tenant VALUES ('\(id)', '\(tenant)', 'apple', '\(sub ?? "none")'), ('\(id)', 'other', 'google', '\(sub ?? "none")');
            """) }
    }

    func value(_ sql: String) throws -> String { try TestDatabase.psql(url, sql) }

    /// Every row of the three tables, as text, in order.
    func everything() throws -> String {
        try value("""
            SELECT (SELECT string_agg(u::text, ';' ORDER BY id) FROM public.users u) || '|' || (SELECT string_agg(c::text, ';' ORDER BY id) FROM public.credentials c)
                || '|' || (SELECT string_agg(t::text, ';' ORDER BY user_id, tenant_id) FROM public.user_to_tenant t)
            """)
    }
}

@Suite("legacy.subject_path and legacy.subject_copies: a subject inside JSON, and its copies in the row and in other tables")
struct LegacySubjectLocationsTests {
    @Test("a migration rewrites the JSON subject, its copy in the row, the array element in another table and the other table's column; nothing else")
    func migration() async throws {
        let f = try await LocationsFixture("subject_locations_migration")
        try await f.user("u1", apple: "old.1")
        try await f.user("u2", apple: "old.2", google: "old.1")
        try await f.user("u3", tenant: "t2", apple: "old.1")
        let before = try f.everything()

        #expect(try await f.store.lookupBySubject("old.1")?.key == "u1")
        let outcome = try await f.store.applyMigration(oldSub: "old.1", newSub: "new.1", newEmail: nil, isPrivateEmail: nil, transferSub: "t.1", method: .exchange)
        guard case .migrated(let user) = outcome else { Issue.record("\(outcome)"); return }
        #expect(user.key == "u1" && user.subject == "new.1")
        #expect(try await f.store.lookupBySubject("new.1")?.key == "u1")
        #expect(try await f.store.lookupBySubject("old.1") == nil)
        // Logto's own lookup finds the user under the new sub only.
        #expect(try f.value("SELECT string_agg(id, ',') FROM public.users WHERE tenant_id = 't1' AND identities::json#>>'{apple,userId}' = 'new.1'") == "u1")
        #expect(try f.value("SELECT identities::text FROM public.users WHERE id = 'u1'")
                == #"{"apple": {"userId": "new.1", "details": {"id": "new.1", "email": "a@privaterelay.appleid.com"}}, "google": {"userId": "g.same", "details": {"id": "g.same"}}}"#)
        #expect(try f.value("SELECT config::text FROM public.credentials WHERE user_id = 'u1'")
                == #"{"v": 2, "providers": [{"subject": "old.1", "provider": "google"}, {"x": 1, "subject": "new.1", "provider": "apple"}]}"#)
        #expect(try f.value("SELECT string_agg(third_party_user_id, ',' ORDER BY tenant_id) FROM public.user_to_tenant WHERE user_id = 'u1'") == "old.1,new.1")
        // Everything else is as it was: the other users (a Google identity holding old.1, another tenant's Apple user old.1).
        let after = try f.everything()
        #expect(after.replacingOccurrences(of: "new.1", with: "old.1") == before)
        #expect(after.components(separatedBy: "new.1").count - 1 == 4)

        // A rollback puts back every copy.
        let migration = try #require(try await f.store.migrations(legacyKey: "u1", since: nil).first)
        #expect(try await f.store.rollBack(migration) == .rolledBack)
        #expect(try f.everything() == before)
        await f.pool.close()
    }

    @Test("without a unique index, concurrent migrations of one user whose old sub two rows hold write the new sub once (Baton's own lock)")
    func ownLock() async throws {
        let f = try await LocationsFixture("subject_locations_lock")
        try await f.user("u1", apple: "old.1")
        try await f.user("u2", apple: "old.1")
        let inspection = try await f.store.inspectLegacyTable()
        let uniqueness = try #require(inspection.findings.first { $0.name == "subject uniqueness" })
        #expect(uniqueness.status == .warning)
        #expect(uniqueness.fix == #"CREATE UNIQUE INDEX CONCURRENTLY ON "public"."users" ("tenant_id", (("identities"::jsonb #>> ARRAY['apple', 'userId']::text[])))"#)
        #expect(inspection.failure == nil)

        let outcomes = try await withThrowingTaskGroup(of: MigrationOutcome.self) { group in
            for _ in 0..<8 {
                group.addTask {
                    try await f.store.applyMigration(oldSub: "old.1", newSub: "new.1", newEmail: nil, isPrivateEmail: nil, transferSub: nil, method: .signin)
                }
            }
            return try await group.reduce(into: []) { $0.append($1) }
        }
        #expect(outcomes.filter { if case .migrated = $0 { true } else { false } }.count == 1)
        #expect(try f.value("SELECT count(*) FROM public.users WHERE identities #>> '{apple,userId}' = 'new.1'") == "1")
        #expect(try f.value("SELECT count(*) FROM baton.events WHERE kind = 'migrated'") == "1")

        // The index Baton prints is the one it then accepts.
        try await f.pool.execute("DELETE FROM public.users WHERE id = 'u2'")
        try await f.pool.execute(PostgresQuery(unsafeSQL: try #require(uniqueness.fix).replacingOccurrences(of: " CONCURRENTLY", with: "")))
        let indexed = try await f.store.inspectLegacyTable().findings.first { $0.name == "subject uniqueness" }
        #expect(indexed?.status == .ok, "\(String(describing: indexed))")
        await f.pool.close()
    }

    @Test("a merge releases a subject excluded by {\"not\": \"\"} to '' (Casdoor), so the released row is no longer an Apple row")
    func releaseToExcludedValue() async throws {
        let url = try TestDatabase.create("subject_locations_release")
        let pool = PostgresPool(url: url, maxConnections: 4, acquireTimeout: .seconds(30))
        _ = try await BatonSchema.migrator().migrate(pool)
        try await pool.withConnection { try await $0.executeScript(unsafeSQL: """
            CREATE TABLE public."user" (owner varchar(100) NOT NULL, name varchar(100) NOT NULL, apple varchar(100) NOT NULL DEFAULT '', PRIMARY KEY (owner, name));
            CREATE UNIQUE INDEX user_apple ON public."user" (owner, apple) WHERE apple <> '';
            INSERT INTO public."user" VALUES ('org', 'legacy', 'old.1'), ('org', 'fresh', 'new.1'), ('org', 'none', ''), ('org', 'none2', '');
            INSERT INTO baton.transfers (old_sub, transfer_sub) VALUES ('old.1', 't.1');
            """) }
        let legacy = BatonConfiguration.Legacy(table: "public.user", keyColumn: "name", subjectColumn: "apple", emailColumn: nil,
                                               filters: ["owner": "org", "apple": .notEquals("")])
        let store = LegacyStore(pool: pool, legacy: try legacy.identifiers())
        #expect(try await store.inspectLegacyTable().failure == nil)
        _ = try await store.recordDuplicate(newSub: "new.1", oldSub: nil, transferSub: "t.1", foundBy: .signin)
        let merged = try await store.mergeDuplicate(DuplicatePair(freshKey: "fresh", legacyKey: "legacy"))
        #expect(merged?.user.subject == "new.1" && merged?.releasedSubject == "")
        #expect(try TestDatabase.psql(url, #"SELECT string_agg(name || '=' || apple, ',' ORDER BY name) FROM public."user""#) == "fresh=,legacy=new.1,none=,none2=")
        await pool.close()
    }

    @Test("configuration: errors name the key")
    func configuration() throws {
        func refusal(_ legacy: BatonConfiguration.Legacy) -> String? {
            do { _ = try legacy.identifiers(); return nil } catch let error as ConfigurationError { return error.key } catch { return "\(error)" }
        }
        var legacy = LocationsFixture.legacy
        legacy.subjectPath = LegacyJSONPath([.key("apple"), .element(member: "provider", value: "apple")])
        #expect(refusal(legacy) == "legacy.subject_path")
        legacy = LocationsFixture.legacy
        legacy.subjectCopies = [LegacySubjectCopy(column: "config", keyColumn: "user_id")]
        #expect(refusal(legacy) == "legacy.subject_copies[0]")
        legacy.subjectCopies = [LegacySubjectCopy(column: "config", table: "public.credentials")]
        #expect(refusal(legacy) == "legacy.subject_copies[0].key_column")
        legacy.subjectCopies = [LegacySubjectCopy(column: "primary_email", path: ["x"])]
        #expect(refusal(legacy) == "legacy.subject_copies[0].column")
        legacy.subjectCopies = [LegacySubjectCopy(column: "x", table: "public.users", keyColumn: "id")]
        #expect(refusal(legacy) == "legacy.subject_copies[0].table")
        legacy.subjectPath = nil
        legacy.subjectCopies = [LegacySubjectCopy(column: "identities", path: ["apple", "details", "id"])]
        #expect(refusal(legacy) == "legacy.subject_copies[0].column")
        let decoded = try JSONDecoder().decode(LegacyJSONPath.self, from: Data(#"["providers", {"provider": "apple"}, "subject"]"#.utf8))
        #expect(decoded == LegacyJSONPath([.key("providers"), .element(member: "provider", value: "apple"), .key("subject")]))
        #expect(throws: DecodingError.self) { try JSONDecoder().decode(LegacyJSONPath.self, from: Data(#"["a", {"b": "c", "d": "e"}]"#.utf8)) }
    }
}
