import BatonAppleSignIn
import Baton
import BatonPostgres
import Foundation
import TestSupport
import Testing

/// A multi-provider identity table (`"Identity"`, reserved and camelCase names, text keys) with the email in
/// `"user"` (unique) and a JSON copy, configured with `legacy` edits.
private struct ShapeFixture {
    let url: String
    let pool: PostgresPool
    let store: LegacyStore

    static func legacy(_ edit: (inout BatonConfiguration.Legacy) -> Void = { _ in }) -> BatonConfiguration.Legacy {
        var legacy = BatonConfiguration.Legacy(
            table: "public.Identity", keyColumn: "id", subjectColumn: "providerSub", emailColumn: nil, transferColumn: "transferSub",
            filters: ["provider": "apple"],
            email: LegacyEmailTable(table: "public.user", column: "email", keyColumn: "id", referenceColumn: "userId"),
            json: LegacyJSONCopy(column: "claims", subjectKeys: ["sub"], emailKeys: ["email"]))
        edit(&legacy)
        return legacy
    }

    init(_ name: String, legacy: BatonConfiguration.Legacy = ShapeFixture.legacy(), poolSize: Int = 8) async throws {
        url = try TestDatabase.create(name)
        pool = PostgresPool(url: url, maxConnections: poolSize, acquireTimeout: .seconds(30))
        _ = try await BatonSchema.migrator().migrate(pool)
        try await pool.withConnection { connection in
            try await connection.executeScript(unsafeSQL: """
                CREATE TABLE public."user" ("id" text PRIMARY KEY, "email" text UNIQUE, "name" text);
                CREATE TABLE public."Identity" ("id" text PRIMARY KEY, "provider" text NOT NULL, "providerSub" text,
                    "userId" text REFERENCES public."user" ("id"), "claims" jsonb, "transferSub" text UNIQUE,
                    UNIQUE ("providerSub", "provider"));
                """)
        }
        store = LegacyStore(pool: pool, legacy: try legacy.identifiers())
    }

    /// An identity of `provider` with `sub`, its user with `email`, and `claims`.
    func add(_ key: String, provider: String = "apple", sub: String?, email: String?, claims: String? = nil, transferSub: String? = nil) async throws {
        try await pool.execute("INSERT INTO public.\"user\" VALUES (\(key), \(email), \(key))")
        try await pool.execute("""
            INSERT INTO public."Identity" VALUES (\(key), \(provider), \(sub), \(key), \(claims)::jsonb, \(transferSub))
            """)
    }

    func value(_ sql: String) throws -> String { try TestDatabase.psql(url, sql) }
    func count(_ sql: String) throws -> Int { Int(try value(sql)) ?? -1 }
}

@Suite("LegacyStore on identity tables: where, email table, JSON copy, email policy, conflicts")
struct LegacyShapesTests {
    @Test("lookups and migrations see only the Apple rows; another provider's row with the same subject is untouched")
    func filter() async throws {
        let f = try await ShapeFixture("shape_filter")
        try await f.add("g1", provider: "google", sub: "old.1", email: "g1@example.org", claims: #"{"sub": "old.1"}"#)
        try await f.add("g2", provider: "google", sub: "new.1", email: "g2@example.org")
        #expect(try await f.store.lookupBySubject("old.1") == nil)
        #expect(CredentialState(try await f.store.credentialFacts(of: "old.1"), transferAccepted: true) == .notFound)
        try await f.add("a1", sub: "old.1", email: "a1@privaterelay.appleid.com", claims: #"{"sub": "old.1", "email": "a1@privaterelay.appleid.com", "iss": "x"}"#)
        #expect(try await f.store.lookupBySubject("old.1") == LegacyUser(key: "a1", subject: "old.1", email: "a1@privaterelay.appleid.com", accountKey: "a1"))
        let outcome = try await f.store.applyMigration(oldSub: "old.1", newSub: "new.1", newEmail: "n1@privaterelay.appleid.com",
                                                      isPrivateEmail: true, transferSub: nil, method: .link)
        #expect(outcome == .migrated(LegacyUser(key: "a1", subject: "new.1", email: "n1@privaterelay.appleid.com", accountKey: "a1")))
        #expect(try f.value(#"SELECT "claims"::text FROM "Identity" WHERE id = 'a1'"#) == #"{"iss": "x", "sub": "new.1", "email": "n1@privaterelay.appleid.com"}"#)
        #expect(try f.value(#"SELECT string_agg("providerSub" || ' ' || coalesce("claims"::text, '-') || ' ' || u.email, ';' ORDER BY i.id) FROM "Identity" i JOIN "user" u ON u.id = i."userId" WHERE provider = 'google'"#)
                == #"old.1 {"sub": "old.1"} g1@example.org;new.1 - g2@example.org"#)
        await f.pool.close()
    }

    @Test("a missing JSON key is not added, a JSON value that is not an object is left alone")
    func jsonShapes() async throws {
        let f = try await ShapeFixture("shape_json")
        try await f.add("a1", sub: "old.1", email: nil, claims: #"{"name": "n"}"#)
        try await f.add("a2", sub: "old.2", email: nil, claims: #"["sub"]"#)
        try await f.add("a3", sub: "old.3", email: nil, claims: nil)
        for index in 1...3 {
            let outcome = try await f.store.applyMigration(oldSub: "old.\(index)", newSub: "new.\(index)", newEmail: "x\(index)@privaterelay.appleid.com",
                                                          isPrivateEmail: true, transferSub: nil, method: .exchange)
            #expect(outcome == .migrated(LegacyUser(key: "a\(index)", subject: "new.\(index)", email: nil, accountKey: "a\(index)")))
        }
        #expect(try f.value(#"SELECT string_agg(coalesce("claims"::text, 'NULL'), ';' ORDER BY id) FROM "Identity""#) == #"{"name": "n"};["sub"];NULL"#)
        await f.pool.close()
    }

    @Test("email policies at migration and on a current user's sign-in: relay, always, never")
    func policies() async throws {
        for policy in EmailPolicy.allCases {
            let f = try await ShapeFixture("shape_policy_\(policy.rawValue)", legacy: ShapeFixture.legacy { $0.emailPolicy = policy })
            try await f.add("relay", sub: "old.r", email: "r@privaterelay.appleid.com", claims: #"{"email": "r@privaterelay.appleid.com"}"#)
            try await f.add("real", sub: "old.m", email: "me@example.com", claims: #"{"email": "me@example.com"}"#)
            _ = try await f.store.applyMigration(oldSub: "old.r", newSub: "new.r", newEmail: "r2@privaterelay.appleid.com", isPrivateEmail: true, transferSub: nil, method: .signin)
            _ = try await f.store.applyMigration(oldSub: "old.m", newSub: "new.m", newEmail: "m2@privaterelay.appleid.com", isPrivateEmail: true, transferSub: nil, method: .signin)
            let emails = try f.value(#"SELECT string_agg(u.email || ' ' || (i.claims->>'email'), ';' ORDER BY u.id) FROM "user" u JOIN "Identity" i ON i."userId" = u.id"#)
            switch policy {
            case .relay: #expect(emails == "me@example.com me@example.com;r2@privaterelay.appleid.com r2@privaterelay.appleid.com")
            case .always: #expect(emails == "m2@privaterelay.appleid.com m2@privaterelay.appleid.com;r2@privaterelay.appleid.com r2@privaterelay.appleid.com")
            case .never: #expect(emails == "me@example.com me@example.com;r@privaterelay.appleid.com r@privaterelay.appleid.com")
            }
            #expect(f.store.emailPolicy == policy)
            // A current user's sign-in with a changed address goes through the same policy.
            let identity = VerifiedIdentity(sub: "new.m", email: "m3@privaterelay.appleid.com", isPrivateEmail: true)
            let result = try await SignInDriver(store: f.store, now: { Date() }).run(.signIn(identity, nonce: nil, emailPolicy: f.store.emailPolicy))
            #expect(result.outcome == .current)
            #expect(result.user?.email == (policy == .always ? "m3@privaterelay.appleid.com" : policy == .relay ? "me@example.com" : "me@example.com"))
            #expect(try f.count("SELECT count(*) FROM baton.events WHERE kind = 'email_changed'") == (policy == .always ? 1 : 0))
            await f.pool.close()
        }
    }

    @Test("without an email location Baton never reads or writes an email")
    func noEmail() async throws {
        let f = try await ShapeFixture("shape_noemail", legacy: ShapeFixture.legacy { $0.email = nil; $0.json = nil; $0.emailPolicy = .always })
        try await f.add("a1", sub: "old.1", email: "a1@privaterelay.appleid.com")
        #expect(f.store.emailPolicy == .never)
        let outcome = try await f.store.applyMigration(oldSub: "old.1", newSub: "new.1", newEmail: "n@privaterelay.appleid.com", isPrivateEmail: true, transferSub: nil, method: .signin)
        #expect(outcome == .migrated(LegacyUser(key: "a1", subject: "new.1", email: nil)))
        #expect(try f.value(#"SELECT email FROM "user""#) == "a1@privaterelay.appleid.com")
        await f.pool.close()
    }

    @Test("an email another row holds: the migration and the refresh succeed, the email is kept, email_conflict records both")
    func emailConflict() async throws {
        let f = try await ShapeFixture("shape_conflict", legacy: ShapeFixture.legacy { $0.emailPolicy = .always })
        try await f.add("a1", sub: "old.1", email: "a1@privaterelay.appleid.com", claims: #"{"email": "a1@privaterelay.appleid.com"}"#)
        try await f.add("g1", provider: "google", sub: "x", email: "taken@example.org")
        let outcome = try await f.store.applyMigration(oldSub: "old.1", newSub: "new.1", newEmail: "taken@example.org", isPrivateEmail: false, transferSub: "t.1", method: .signin)
        #expect(outcome == .migrated(LegacyUser(key: "a1", subject: "new.1", email: "a1@privaterelay.appleid.com", accountKey: "a1")))
        #expect(try f.value(#"SELECT "providerSub" || ' ' || (claims->>'email') FROM "Identity" WHERE id = 'a1'"#) == "new.1 a1@privaterelay.appleid.com")
        #expect(try f.count("SELECT count(*) FROM baton.events WHERE kind = 'email_conflict' AND old_email = 'a1@privaterelay.appleid.com' AND new_email = 'taken@example.org'") == 1)
        let user = LegacyUser(key: "a1", subject: "new.1", email: "a1@privaterelay.appleid.com", accountKey: "a1")
        #expect(try await f.store.updateEmail(of: user, to: "taken@example.org") == user)
        #expect(try f.count("SELECT count(*) FROM baton.events WHERE kind = 'email_conflict'") == 2)
        #expect(try f.count("SELECT count(*) FROM baton.events WHERE kind = 'email_changed'") == 0)
        await f.pool.close()
    }

    @Test("between companies: a NULL subject and the transfer identifier; 8 concurrent sign-ins rewrite it once")
    func transferColumnOnly() async throws {
        let f = try await ShapeFixture("shape_xco", poolSize: 12)
        for index in 0..<10 {
            try await f.add("r\(index)", sub: nil, email: nil, claims: #"{"sub": null}"#, transferSub: "t.\(index)")
        }
        try await f.add("g", provider: "google", sub: "new.0", email: "g@example.org")
        let store = f.store
        let outcomes = try await withThrowingTaskGroup(of: MigrationOutcome.self) { group in
            for index in 0..<10 {
                for _ in 0..<8 {
                    group.addTask {
                        try await store.applyMigration(transferSub: "t.\(index)", newSub: "new.\(index)", newEmail: nil, isPrivateEmail: nil, method: .signin)
                    }
                }
            }
            return try await group.reduce(into: [MigrationOutcome]()) { $0.append($1) }
        }
        let migrated = outcomes.filter { if case .migrated = $0 { true } else { false } }
        #expect(migrated.count == 10)
        #expect(outcomes.count - migrated.count == 70)
        #expect(outcomes.allSatisfy { if case .migrated = $0 { true } else if case .alreadyMigrated = $0 { true } else { false } })
        #expect(try f.count("SELECT count(*) FROM baton.events WHERE kind = 'migrated' AND old_sub IS NULL") == 10)
        #expect(try f.count("SELECT count(*) FROM baton.transfers WHERE state = 'migrated' AND old_sub IS NULL AND legacy_key LIKE 'r%'") == 10)
        #expect(try f.count(#"SELECT count(*) FROM "Identity" WHERE provider = 'apple' AND "providerSub" = 'new.' || substr(id, 2)"#) == 10)
        #expect(try await store.applyMigration(transferSub: "t.unknown", newSub: "new.x", newEmail: nil, isPrivateEmail: nil, method: .signin) == .legacyRecordMissing)
        await f.pool.close()
    }

    @Test("start-up: the key must be unique and the subject unique with the where columns, each with its fix")
    func inspection() async throws {
        let f = try await ShapeFixture("shape_inspect")
        let found = try await f.store.validateLegacyTable().findings.map { "\($0.status) \($0.name)" }
        #expect(found.contains("ok subject uniqueness") && found.contains("ok key uniqueness") && found.contains("ok json copy"))
        try await f.pool.execute(#"CREATE TABLE public.loose ("id" text, "provider" text, "providerSub" text, "userId" text, "claims" jsonb, "transferSub" text)"#)
        let loose = LegacyStore(pool: f.pool, legacy: try ShapeFixture.legacy { $0.table = "public.loose" }.identifiers())
        let inspection = try await loose.inspectLegacyTable()
        #expect(inspection.findings.first { $0.name == "key uniqueness" }?.status == .failure)
        #expect(inspection.failure?.fix == #"CREATE UNIQUE INDEX CONCURRENTLY ON "public"."loose" ("provider", "providerSub")"#)
        let error = await #expect(throws: BatonError.self) { try await loose.validateLegacyTable() }
        #expect(error?.code == .invalidLegacyTable)
        try await f.pool.execute(#"CREATE UNIQUE INDEX ON public.loose ("providerSub", "provider")"#)
        #expect(try await loose.inspectLegacyTable().failure?.name == "key uniqueness")
        await f.pool.close()
    }

    @Test("start-up: a key that is not unique gets the index that makes it unique with the where columns, or the table's unique column")
    func keyAdvice() async throws {
        let f = try await ShapeFixture("shape_key_advice")
        // The primary key is `id`: naming it is one way, the index over the where column and the key the other.
        let byUser = LegacyStore(pool: f.pool, legacy: try ShapeFixture.legacy { $0.keyColumn = "userId" }.identifiers())
        let failure = try #require(try await byUser.inspectLegacyTable().failure)
        #expect(failure.name == "key uniqueness")
        #expect(failure.detail == "legacy.key_column userId is not unique among the rows legacy.where selects, so a rewrite could reach several rows")
        #expect(failure.fix == #"name id (unique) in legacy.key_column, or run CREATE UNIQUE INDEX CONCURRENTLY ON "public"."Identity" ("provider", "userId")"#)
        // Gitea's shape: a primary key over the subject and the provider, no column unique on its own: the statement alone.
        try await f.pool.execute(#"CREATE TABLE public.links ("provider" text NOT NULL, "providerSub" text NOT NULL, "userId" text, "claims" jsonb, "transferSub" text, PRIMARY KEY ("providerSub", "provider"))"#)
        let links = LegacyStore(pool: f.pool, legacy: try ShapeFixture.legacy { $0.table = "public.links"; $0.keyColumn = "userId" }.identifiers())
        let statement = #"CREATE UNIQUE INDEX CONCURRENTLY ON "public"."links" ("provider", "userId")"#
        #expect(try await links.inspectLegacyTable().failure?.fix == statement)
        _ = try f.value(statement.replacingOccurrences(of: " CONCURRENTLY", with: ""))
        #expect(try await links.inspectLegacyTable().failure == nil)
        // Unique only among the Apple rows (a partial index the filter implies) is as good.
        try await f.pool.execute(#"DROP INDEX public."links_provider_userId_idx""#)
        try await f.pool.execute(#"CREATE UNIQUE INDEX ON public.links ("userId") WHERE provider = 'apple'"#)
        #expect(try await links.inspectLegacyTable().failure == nil)
        await f.pool.close()
    }

    @Test("on a large identity table the sign-in statements are index scans: lookup, and migration by transfer identifier")
    func plans() async throws {
        let f = try await ShapeFixture("shape_plans")
        try await f.pool.execute(#"""
            INSERT INTO public."user" SELECT 'u' || n, 'u' || n || '@example.org', 'n' FROM generate_series(1, 20000) AS n;
            """#)
        try await f.pool.execute(#"""
            INSERT INTO public."Identity" SELECT 'i' || n, CASE WHEN n % 3 = 0 THEN 'google' ELSE 'apple' END, 'sub.' || n, 'u' || n,
                jsonb_build_object('sub', 'sub.' || n), 't.' || n FROM generate_series(1, 20000) AS n;
            """#)
        try await f.pool.execute("INSERT INTO baton.transfers (old_sub, transfer_sub) SELECT 'sub.' || n, 'bt.' || n FROM generate_series(1, 20000) AS n")
        // Users of other apps' rows too: at 100,000 rows the transfer identifier's index is a level deeper than the
        // all-NULL key index, which is when a plan on `legacy_key IS NOT NULL` looks cheaper.
        try await f.pool.execute("INSERT INTO baton.transfers (old_sub, transfer_sub) SELECT 'other.' || n, 'bx.' || n FROM generate_series(1, 80000) AS n")
        try await f.pool.execute(#"ANALYZE public."Identity""#)
        try await f.pool.execute(#"ANALYZE public."user""#)
        try await f.pool.execute("ANALYZE baton.transfers")
        func plan(_ query: PostgresQuery) async throws -> String {
            try await f.pool.query(PostgresQuery(unsafeSQL: "EXPLAIN " + query.sql, query.bindings)).map { try $0.decode(String.self, at: 0) }.joined(separator: "\n")
        }
        let lookup = try await plan(f.store.lookupQuery(subject: "sub.5", transferSub: "bt.5"))
        let migration = try await plan(f.store.migrationQuery(from: .transfer("bt.5"), newSub: "new.5", newEmail: "x@privaterelay.appleid.com",
                                                              isPrivateEmail: true, transferSub: "bt.5", method: .signin))
        let byColumn = try await plan(f.store.migrationQuery(from: .transfer("t.5"), newSub: "new.5", newEmail: nil, isPrivateEmail: nil,
                                                             transferSub: "t.5", method: .signin))
        for text in [lookup, migration, byColumn] {
            #expect(!text.contains("Seq Scan on \"Identity\"") && !text.contains("Seq Scan on \"user\""), "\(text)")
            // Statistics taken while no row had a key make `legacy_key IS NOT NULL` look rare: the key's arm must still
            // probe by transfer identifier, not walk the key index over every migrated row.
            #expect(!text.contains("transfers_legacy_key_idx") && !text.contains("Seq Scan on transfers"), "\(text)")
        }
        #expect(try await f.store.applyMigration(transferSub: "bt.5", newSub: "new.5", newEmail: nil, isPrivateEmail: nil, method: .signin)
                == .migrated(LegacyUser(key: "i5", subject: "new.5", email: "u5@example.org", accountKey: "u5")))
        await f.pool.close()
    }

    @Test("a recipient's row known only by its imported key is found by an index scan when the key is not text")
    func planByImportedKey() async throws {
        let url = try TestDatabase.create("shape_plan_key")
        let pool = PostgresPool(url: url, maxConnections: 4)
        _ = try await BatonSchema.migrator().migrate(pool)
        try await pool.withConnection { connection in
            try await connection.executeScript(unsafeSQL: """
                CREATE TABLE public.users (id bigint PRIMARY KEY, apple_sub text UNIQUE, email text);
                INSERT INTO public.users SELECT n, NULL, 'u' || n || '@example.org' FROM generate_series(1, 20000) AS n;
                INSERT INTO baton.transfers (transfer_sub, legacy_key) SELECT 'bt.' || n, n::text FROM generate_series(1, 20000) AS n;
                ANALYZE public.users;
                ANALYZE baton.transfers;
                """)
        }
        let legacy = BatonConfiguration.Legacy(table: "public.users", keyColumn: "id", subjectColumn: "apple_sub", emailColumn: "email")
        let store = LegacyStore(pool: pool, legacy: try legacy.identifiers())
        let query = store.migrationQuery(from: .transfer("bt.5"), newSub: "new.5", newEmail: nil, isPrivateEmail: nil,
                                         transferSub: "bt.5", method: .exchange)
        let plan = try await pool.query(PostgresQuery(unsafeSQL: "EXPLAIN " + query.sql, query.bindings))
            .map { try $0.decode(String.self, at: 0) }.joined(separator: "\n")
        #expect(!plan.contains("Seq Scan on users"), "\(plan)")
        #expect(try await store.applyMigration(transferSub: "bt.5", newSub: "new.5", newEmail: nil, isPrivateEmail: nil, method: .exchange)
                == .migrated(LegacyUser(key: "5", subject: "new.5", email: "u5@example.org")))
        #expect(try TestDatabase.psql(url, "SELECT count(*) FROM public.users WHERE apple_sub IS NOT NULL") == "1")
        await pool.close()
    }

    @Test("a key unique only among the Apple rows (Keycloak's shape): writes never reach the same key's other rows")
    func keyUniqueWithFilter() async throws {
        let url = try TestDatabase.create("shape_keycloak")
        let pool = PostgresPool(url: url, maxConnections: 4)
        _ = try await BatonSchema.migrator().migrate(pool)
        try await pool.withConnection { connection in
            try await connection.executeScript(unsafeSQL: """
                CREATE TABLE public.federated_identity (identity_provider varchar(255) NOT NULL, user_id varchar(36) NOT NULL,
                    federated_user_id varchar(255), email varchar(255), token jsonb, PRIMARY KEY (identity_provider, user_id));
                CREATE UNIQUE INDEX ON public.federated_identity (identity_provider, federated_user_id);
                INSERT INTO public.federated_identity VALUES ('apple', 'u1', 'old.1', 'a@privaterelay.appleid.com', '{"sub": "old.1"}'),
                                                             ('google', 'u1', 'old.1', 'a@privaterelay.appleid.com', '{"sub": "old.1"}');
                """)
        }
        let legacy = BatonConfiguration.Legacy(table: "public.federated_identity", keyColumn: "user_id", subjectColumn: "federated_user_id",
                                               emailColumn: "email", filters: ["identity_provider": "apple"],
                                               json: LegacyJSONCopy(column: "token", subjectKeys: ["sub"], emailKeys: ["email"]), emailPolicy: .always)
        let store = LegacyStore(pool: pool, legacy: try legacy.identifiers())
        #expect(try await store.validateLegacyTable().failure == nil)
        let outcome = try await store.applyMigration(oldSub: "old.1", newSub: "new.1", newEmail: "b@privaterelay.appleid.com", isPrivateEmail: true,
                                                     transferSub: nil, method: .exchange)
        #expect(outcome == .migrated(LegacyUser(key: "u1", subject: "new.1", email: "b@privaterelay.appleid.com")))
        let user = LegacyUser(key: "u1", subject: "new.1", email: "b@privaterelay.appleid.com")
        #expect(try await store.updateEmail(of: user, to: "me@example.com")?.email == "me@example.com")
        #expect(try TestDatabase.psql(url, "SELECT string_agg(identity_provider || ' ' || federated_user_id || ' ' || email || ' ' || token::text, ';' ORDER BY identity_provider) FROM public.federated_identity")
                == #"apple new.1 me@example.com {"sub": "new.1"};google old.1 a@privaterelay.appleid.com {"sub": "old.1"}"#)
        await pool.close()
    }
}
