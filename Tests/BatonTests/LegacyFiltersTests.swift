import Baton
import BatonPostgres
import Foundation
import TestSupport
import Testing

/// A fresh database with Baton's schema and the tables `sql` creates.
private func database(_ name: String, _ sql: String) async throws -> (url: String, pool: PostgresPool) {
    let url = try TestDatabase.create(name)
    let pool = PostgresPool(url: url, maxConnections: 4)
    _ = try await BatonSchema.migrator().migrate(pool)
    try await pool.withConnection { try await $0.executeScript(unsafeSQL: sql) }
    return (url, pool)
}

@Suite("legacy.where beyond equality, and the unique indexes start-up accepts")
struct LegacyFiltersTests {
    @Test("not empty on the subject column itself (Casdoor's \"user\".apple, '' for everyone else) with a partial unique index")
    func notEmpty() async throws {
        let (url, pool) = try await database("filter_not_empty", """
            CREATE TABLE public."user" (id varchar(100) PRIMARY KEY, apple varchar(100) NOT NULL DEFAULT '', google varchar(100) NOT NULL DEFAULT '',
                email varchar(100));
            CREATE UNIQUE INDEX user_apple ON public."user" (apple) WHERE apple <> '';
            INSERT INTO public."user" VALUES ('a1', 'old.1', '', 'a1@privaterelay.appleid.com'), ('a2', 'old.2', '', 'a2@example.org'),
                ('g1', '', 'old.1', 'g1@example.org'), ('g2', '', 'old.2', NULL), ('p', '', '', 'p@example.org');
            """)
        let legacy = BatonConfiguration.Legacy(table: "public.user", keyColumn: "id", subjectColumn: "apple", emailColumn: "email",
                                               filters: ["apple": .notEquals("")])
        let store = LegacyStore(pool: pool, legacy: try legacy.identifiers())
        let inspection = try await store.validateLegacyTable()
        #expect(inspection.findings.first { $0.name == "subject uniqueness" }?.detail == "unique index user_apple on (apple) where ((apple)::text <> ''::text)")
        let rows = inspection.findings.first { $0.name == "apple rows" }?.detail ?? ""
        #expect(rows.hasPrefix("legacy.where selects 2 rows of") && rows.contains(#"("apple" <> '')"#), "\(rows)")
        #expect(try await LegacySeeder(pool: pool, legacy: store.legacy).preview().count == 2)
        let others = #"SELECT string_agg(u::text, ';' ORDER BY id) FROM public."user" u WHERE id NOT LIKE 'a%'"#
        let before = try TestDatabase.psql(url, others)
        #expect(try await store.lookupBySubject("") == nil)
        #expect(try await store.lookupBySubject("old.1")?.key == "a1")
        let outcome = try await store.applyMigration(oldSub: "old.1", newSub: "new.1", newEmail: "n1@privaterelay.appleid.com", isPrivateEmail: true,
                                                     transferSub: nil, method: .exchange)
        #expect(outcome == .migrated(LegacyUser(key: "a1", subject: "new.1", email: "n1@privaterelay.appleid.com")))
        #expect(try TestDatabase.psql(url, #"SELECT apple || ' ' || email FROM public."user" WHERE id = 'a1'"#) == "new.1 n1@privaterelay.appleid.com")
        #expect(try TestDatabase.psql(url, others) == before)
        await pool.close()
    }

    @Test("on a large table with only the partial index, a lookup under {\"not\": \"\"} is an index scan")
    func notEmptyPlan() async throws {
        let (_, pool) = try await database("filter_not_empty_plan", """
            CREATE TABLE public."user" (id varchar(100) PRIMARY KEY, apple varchar(100) NOT NULL DEFAULT '', email varchar(100));
            CREATE UNIQUE INDEX user_apple ON public."user" (apple) WHERE apple <> '';
            INSERT INTO public."user" SELECT 'u' || n, CASE WHEN n % 4 = 0 THEN 'sub.' || n ELSE '' END, NULL FROM generate_series(1, 20000) AS n;
            ANALYZE public."user";
            """)
        let legacy = BatonConfiguration.Legacy(table: "public.user", keyColumn: "id", subjectColumn: "apple", emailColumn: "email",
                                               filters: ["apple": .notEquals("")])
        let store = LegacyStore(pool: pool, legacy: try legacy.identifiers())
        let query = store.lookupQuery(subject: "sub.8", transferSub: nil)
        let plan = try await pool.query(PostgresQuery(unsafeSQL: "EXPLAIN " + query.sql, query.bindings)).map { try $0.decode(String.self, at: 0) }.joined(separator: "\n")
        #expect(plan.contains("user_apple") && !plan.contains("Seq Scan on \"user\""), "\(plan)")
        #expect(try await store.lookupBySubject("sub.8")?.key == "u8")
        await pool.close()
    }

    @Test("in a list and not_null select exactly their rows; another provider's row holding an Apple user's subject is untouched byte for byte")
    func inAndNotNull() async throws {
        let (url, pool) = try await database("filter_in", """
            CREATE TABLE public.identity (id text PRIMARY KEY, provider text NOT NULL, sub text, linked_at timestamptz, email text);
            CREATE UNIQUE INDEX identity_apple ON public.identity (sub) WHERE provider IN ('apple', 'apple-ios') AND linked_at IS NOT NULL;
            INSERT INTO public.identity VALUES ('a1', 'apple', 'old.1', now(), 'a1@privaterelay.appleid.com'),
                ('a2', 'apple-ios', 'old.2', now(), 'a2@privaterelay.appleid.com'),
                ('u3', 'apple', 'old.3', NULL, 'u3@privaterelay.appleid.com'),
                ('g1', 'google', 'old.1', now(), 'g1@example.org'), ('g2', 'google', 'old.2', now(), 'g2@example.org');
            """)
        let legacy = BatonConfiguration.Legacy(table: "public.identity", keyColumn: "id", subjectColumn: "sub", emailColumn: "email",
                                               filters: ["provider": .oneOf(["apple", "apple-ios"]), "linked_at": .notNull])
        let store = LegacyStore(pool: pool, legacy: try legacy.identifiers())
        #expect(try await store.validateLegacyTable().failure == nil)
        #expect(try await LegacySeeder(pool: pool, legacy: store.legacy).preview().count == 2)
        #expect(try await store.lookupBySubject("old.3") == nil)
        let others = "SELECT string_agg(i::text, ';' ORDER BY id) FROM public.identity i WHERE id NOT LIKE 'a%'"
        let before = try TestDatabase.psql(url, others)
        for index in 1...2 {
            let outcome = try await store.applyMigration(oldSub: "old.\(index)", newSub: "new.\(index)", newEmail: nil, isPrivateEmail: nil,
                                                         transferSub: nil, method: .signin)
            #expect(outcome == .migrated(LegacyUser(key: "a\(index)", subject: "new.\(index)", email: "a\(index)@privaterelay.appleid.com")))
        }
        #expect(try await store.applyMigration(oldSub: "old.3", newSub: "new.3", newEmail: nil, isPrivateEmail: nil, transferSub: nil, method: .signin)
                == .legacyRecordMissing)
        #expect(try TestDatabase.psql(url, others) == before)
        await pool.close()
    }

    @Test("the unique indexes start-up accepts, and the statement it names when none qualifies", arguments: [
        // (case, filters, the index, nil when accepted or else the fix named)
        (1, #"{"provider": "apple"}"#, "(provider, sub)", nil),
        (2, #"{"provider": "apple"}"#, "(sub)", nil),
        (3, #"{"provider": "apple"}"#, "(sub) WHERE provider = 'apple'", nil),
        (4, #"{"provider": "apple", "kind": {"not_null": true}}"#, "(provider, sub) WHERE kind IS NOT NULL", nil),
        (5, #"{"sub": {"not": ""}}"#, "(sub) WHERE sub <> ''", nil),
        (6, #"{}"#, "(sub) WHERE sub IS NOT NULL", nil),
        (7, #"{"provider": {"in": ["a", "b"]}}"#, "(sub) WHERE provider IN ('a', 'b', 'c')", nil),
        (8, #"{"provider": {"in": ["a"]}}"#, "(provider, sub)", nil),
        (9, #"{"provider": "apple"}"#, "(sub, kind)", #"CREATE UNIQUE INDEX CONCURRENTLY ON "public"."t" ("provider", "sub")"#),
        (10, #"{"provider": "apple"}"#, "(lower(sub))", #"CREATE UNIQUE INDEX CONCURRENTLY ON "public"."t" ("provider", "sub")"#),
        (11, #"{"provider": "apple"}"#, "(sub) WHERE provider = 'apple' OR kind = 'x'", #"CREATE UNIQUE INDEX CONCURRENTLY ON "public"."t" ("provider", "sub")"#),
        (12, #"{"sub": {"not": ""}}"#, "(sub) WHERE sub <> 'x'", #"CREATE UNIQUE INDEX CONCURRENTLY ON "public"."t" ("sub") WHERE "sub" <> ''"#),
        (13, #"{"sub": {"not": ""}}"#, "(sub) WHERE kind IS NOT NULL", #"CREATE UNIQUE INDEX CONCURRENTLY ON "public"."t" ("sub") WHERE "sub" <> ''"#),
        (14, #"{"provider": {"in": ["a", "b'c"]}}"#, "(provider, sub)", #"CREATE UNIQUE INDEX CONCURRENTLY ON "public"."t" ("sub") WHERE "provider" IN ('a', 'b''c')"#),
        (15, #"{"provider": {"in": ["a", "b"]}}"#, "(sub) WHERE provider IN ('a', 'c')", #"CREATE UNIQUE INDEX CONCURRENTLY ON "public"."t" ("sub") WHERE "provider" IN ('a', 'b')"#),
        (16, #"{"provider": {"in": ["a", "b\\c"]}}"#, "(provider, sub)", #"CREATE UNIQUE INDEX CONCURRENTLY ON "public"."t" ("sub") WHERE "provider" IN ('a', E'b\\c')"#),
    ] as [(Int, String, String, String?)])
    func indexes(case number: Int, filters: String, index: String, fix: String?) async throws {
        let name = "filter_index_\(number)"
        let (_, pool) = try await database(name, """
            CREATE TABLE public.t (id text PRIMARY KEY, provider varchar(20), sub varchar(100), kind text);
            CREATE UNIQUE INDEX t_subject ON public.t \(index);
            """)
        let where_ = try JSONDecoder().decode([String: LegacyCondition].self, from: Data(filters.utf8))
        let legacy = BatonConfiguration.Legacy(table: "public.t", keyColumn: "id", subjectColumn: "sub", emailColumn: nil, filters: where_)
        let store = LegacyStore(pool: pool, legacy: try legacy.identifiers())
        let finding = try #require(try await store.inspectLegacyTable().findings.first { $0.name == "subject uniqueness" })
        if let fix {
            #expect(finding.status == .failure)
            #expect(finding.fix == fix)
            // The statement named is one start-up accepts.
            try await pool.execute("DROP INDEX public.t_subject")
            try await pool.execute(PostgresQuery(unsafeSQL: fix))
            #expect(try await store.validateLegacyTable().failure == nil)
        } else {
            #expect(finding.status == .ok, "\(finding.detail)")
            #expect(finding.detail.hasPrefix("unique index t_subject on"))
        }
        await pool.close()
    }

    @Test("where conditions are validated naming the key; from the environment a JSON object")
    func configuration() throws {
        let base = #"{"database": {"url": "postgresql://localhost/x"}, "apple": {"client_ids": ["com.example.app"]}, "legacy": {"table": "t", "key_column": "id", "subject_column": "sub", "where": WHERE}}"#
        func load(_ where_: String, environment: [String: String] = [:]) throws -> BatonConfiguration {
            try BatonConfiguration.load(json: Data(base.replacingOccurrences(of: "WHERE", with: where_).utf8), baseDirectory: "/", environment: environment)
        }
        let loaded = try load(#"{"provider": {"in": ["a", "b"]}, "kind": {"not_null": true}, "sub": {"not": ""}, "x": "y"}"#)
        #expect(loaded.legacy.filters == ["provider": .oneOf(["a", "b"]), "kind": .notNull, "sub": .notEquals(""), "x": "y"])
        for (bad, key) in [(#"{"provider": {"in": []}}"#, "legacy.where.provider"), (#"{"provider": {"is": "a"}}"#, "legacy.where.provider"),
                           (#"{"provider": {"not_null": false}}"#, "legacy.where.provider"), (#"{"provider": {"not": "a", "in": ["b"]}}"#, "legacy.where.provider"),
                           (#"{"sub": "x"}"#, "legacy.where"), (#"{"sub": {"in": ["x"]}}"#, "legacy.where")] {
            let error = #expect(throws: ConfigurationError.self) { try load(bad).legacy.identifiers() }
            #expect(error?.key == key, "\(bad): \(String(describing: error))")
        }
        let fromEnvironment = try load("null", environment: ["BATON_LEGACY_WHERE": #"{"apple": {"not": ""}}"#])
        #expect(fromEnvironment.legacy.filters == ["apple": .notEquals("")])
        #expect(try load("null", environment: ["BATON_LEGACY_WHERE": "provider=apple"]).legacy.filters == ["provider": "apple"])
    }
}
