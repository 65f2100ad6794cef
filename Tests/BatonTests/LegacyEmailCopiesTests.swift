import Baton
import BatonPostgres
import Foundation
import TestSupport
import Testing

/// allauth's shape: identities shared by providers, the email in `"user"` (unique), and a further copy of it in
/// `emailaddress` (one row per address, with `verified` and `primary`), named in `legacy.email_copies`.
private struct CopyFixture {
    let url: String
    let pool: PostgresPool
    let store: LegacyStore

    static func legacy(_ edit: (inout BatonConfiguration.Legacy) -> Void = { _ in }) -> BatonConfiguration.Legacy {
        var legacy = BatonConfiguration.Legacy(
            table: "public.identity", keyColumn: "id", subjectColumn: "uid", emailColumn: nil, filters: ["provider": "apple"],
            email: LegacyEmailTable(table: "public.user", column: "email", keyColumn: "id", referenceColumn: "user_id"),
            emailCopies: [LegacyEmailCopy(table: "public.emailaddress", column: "email", userColumn: "user_id")])
        edit(&legacy)
        return legacy
    }

    init(_ name: String, legacy: BatonConfiguration.Legacy = CopyFixture.legacy()) async throws {
        url = try TestDatabase.create(name)
        pool = PostgresPool(url: url, maxConnections: 4, acquireTimeout: .seconds(30))
        _ = try await BatonSchema.migrator().migrate(pool)
        try await pool.withConnection { connection in
            try await connection.executeScript(unsafeSQL: """
                CREATE TABLE public."user" (id integer PRIMARY KEY, email varchar(254) UNIQUE, name text);
                CREATE TABLE public.identity (id bigint PRIMARY KEY, provider text NOT NULL, uid text NOT NULL,
                    user_id integer NOT NULL REFERENCES public."user" (id), UNIQUE (provider, uid));
                CREATE TABLE public.emailaddress (id serial PRIMARY KEY, user_id integer NOT NULL REFERENCES public."user" (id),
                    email varchar(254) NOT NULL, verified boolean NOT NULL, "primary" boolean NOT NULL, UNIQUE (user_id, email));
                CREATE INDEX ON public.emailaddress (user_id);
                CREATE UNIQUE INDEX emailaddress_verified ON public.emailaddress (email) WHERE verified;
                """)
        }
        store = LegacyStore(pool: pool, legacy: try legacy.identifiers())
    }

    /// User `n` with an identity of `provider` and `sub`, `email` in the users table, and `addresses` in the
    /// copy table as (email, verified, primary).
    func add(_ n: Int, provider: String = "apple", sub: String, email: String, addresses: [(String, Bool, Bool)]) async throws {
        try await pool.execute("INSERT INTO public.\"user\" VALUES (\(n), \(email), \("name \(n)"))")
        try await pool.execute("INSERT INTO public.identity VALUES (\(n), \(provider), \(sub), \(n))")
        for (address, verified, primary) in addresses {
            try await pool.execute("INSERT INTO public.emailaddress (user_id, email, verified, \"primary\") VALUES (\(n), \(address), \(verified), \(primary))")
        }
    }

    func value(_ sql: String) throws -> String { try TestDatabase.psql(url, sql) }

    /// The copy table's rows other than `except` (ids), byte for byte, and the columns of `except` other than the email.
    func digest(except ids: [Int]) throws -> String {
        let list = ids.isEmpty ? "0" : ids.map(String.init).joined(separator: ",")
        return try value("""
            SELECT md5(string_agg(x, '|' ORDER BY x)) || ' ' || count(*) FROM (
                SELECT e::text AS x FROM public.emailaddress e WHERE e.id NOT IN (\(list))
                UNION ALL SELECT (to_jsonb(e) - 'email')::text FROM public.emailaddress e WHERE e.id IN (\(list))) AS rows
            """)
    }

    func address(_ id: Int) throws -> String {
        try value("SELECT email || ' ' || verified || ' ' || \"primary\" FROM public.emailaddress WHERE id = \(id)")
    }
}

@Suite("legacy.email_copies: the user's row holding the old address follows the email")
struct LegacyEmailCopiesTests {
    static let old1 = "a1@privaterelay.appleid.com", new1 = "b1@privaterelay.appleid.com"

    @Test("a migration, by subject and by transfer identifier, rewrites only the row holding the old address; every other row and column is unchanged")
    func migration() async throws {
        let f = try await CopyFixture("copies_migration")
        // Address ids: 1 (user 1's relay, primary), 2 (user 1's own), 3 (user 2's relay), 4 (the google user's, same
        // address as user 1's relay but not verified), 5 (user 3's relay).
        try await f.add(1, sub: "old.1", email: Self.old1, addresses: [(Self.old1, true, true), ("me1@example.com", true, false)])
        try await f.add(2, sub: "old.2", email: "a2@privaterelay.appleid.com", addresses: [("a2@privaterelay.appleid.com", true, true)])
        try await f.add(9, provider: "google", sub: "old.1", email: "g@example.org", addresses: [(Self.old1, false, false)])
        try await f.add(3, sub: "old.3", email: "a3@privaterelay.appleid.com", addresses: [("a3@privaterelay.appleid.com", true, true)])
        let before = try f.digest(except: [1, 5])

        let outcome = try await f.store.applyMigration(oldSub: "old.1", newSub: "new.1", newEmail: Self.new1, isPrivateEmail: true,
                                                       transferSub: nil, method: .exchange)
        #expect(outcome == .migrated(LegacyUser(key: "1", subject: "new.1", email: Self.new1, accountKey: "1")))
        try await f.pool.execute("INSERT INTO baton.transfers (old_sub, transfer_sub) VALUES ('old.3', 't.3')")
        let third = try await f.store.applyMigration(transferSub: "t.3", newSub: "new.3", newEmail: "b3@privaterelay.appleid.com", isPrivateEmail: true, method: .signin)
        #expect(third == .migrated(LegacyUser(key: "3", subject: "new.3", email: "b3@privaterelay.appleid.com", accountKey: "3")))

        #expect(try f.address(1) == "\(Self.new1) true true")
        #expect(try f.address(5) == "b3@privaterelay.appleid.com true true")
        #expect(try f.digest(except: [1, 5]) == before)
        #expect(try f.value("SELECT count(*) FROM baton.events WHERE kind = 'email_conflict'") == "0")
        await f.pool.close()
    }

    @Test("another row already holding the new address: the migration and the main email go through, the copy keeps the old address, email_conflict names it")
    func conflict() async throws {
        let f = try await CopyFixture("copies_conflict")
        try await f.add(1, sub: "old.1", email: Self.old1, addresses: [(Self.old1, true, true)])
        try await f.add(2, provider: "google", sub: "g.2", email: "g@example.org", addresses: [(Self.new1, true, false)])
        let before = try f.digest(except: [])
        let outcome = try await f.store.applyMigration(oldSub: "old.1", newSub: "new.1", newEmail: Self.new1, isPrivateEmail: true,
                                                       transferSub: "t.1", method: .signin)
        #expect(outcome == .migrated(LegacyUser(key: "1", subject: "new.1", email: Self.new1, accountKey: "1")))
        #expect(try f.digest(except: []) == before)
        #expect(try f.value("SELECT kind || ' ' || old_email || ' ' || new_email || ' ' || method || ' ' || transfer_sub || ' ' || (detail->>'copy') FROM baton.events WHERE kind = 'email_conflict'")
                == "email_conflict \(Self.old1) \(Self.new1) signin t.1 public.emailaddress")
        #expect(try f.value("SELECT count(*) FROM baton.events WHERE kind = 'migrated' AND new_email = '\(Self.new1)'") == "1")

        // The current user's refresh follows the same rule.
        let user = LegacyUser(key: "1", subject: "new.1", email: Self.new1)
        try await f.pool.execute("DELETE FROM public.emailaddress WHERE user_id = 2")
        try await f.pool.execute("UPDATE public.emailaddress SET email = \(Self.new1) WHERE user_id = 1")
        try await f.add(3, provider: "google", sub: "g.3", email: "g3@example.org", addresses: [("c1@privaterelay.appleid.com", false, false)])
        #expect(try await f.store.updateEmail(of: user, to: "c1@privaterelay.appleid.com")?.email == "c1@privaterelay.appleid.com")
        #expect(try f.value("SELECT email FROM public.emailaddress WHERE user_id = 1") == Self.new1)
        #expect(try f.value("SELECT count(*) FROM baton.events WHERE kind = 'email_conflict' AND new_email = 'c1@privaterelay.appleid.com' AND detail->>'copy' = 'public.emailaddress'") == "1")
        await f.pool.close()
    }

    @Test("a current user's new relay address reaches the copy; an address the user gave is kept under relay, replaced under always, never under never")
    func refreshAndPolicies() async throws {
        for policy in EmailPolicy.allCases {
            let f = try await CopyFixture("copies_policy_\(policy.rawValue)", legacy: CopyFixture.legacy { $0.emailPolicy = policy })
            try await f.add(1, sub: "s.1", email: Self.old1, addresses: [(Self.old1, true, true)])
            try await f.add(2, sub: "s.2", email: "me@example.com", addresses: [("me@example.com", true, true), (Self.old1.replacingOccurrences(of: "a1", with: "z2"), false, false)])
            let before = try f.digest(except: [1, 2])
            _ = try await f.store.updateEmail(of: LegacyUser(key: "1", subject: "s.1", email: Self.old1), to: Self.new1)
            _ = try await f.store.updateEmail(of: LegacyUser(key: "2", subject: "s.2", email: "me@example.com"), to: "b2@privaterelay.appleid.com")
            let expected: (String, String) = switch policy {
            case .relay: (Self.new1, "me@example.com")
            case .always: (Self.new1, "b2@privaterelay.appleid.com")
            case .never: (Self.old1, "me@example.com")
            }
            #expect(try f.address(1) == "\(expected.0) true true", "\(policy)")
            #expect(try f.address(2) == "\(expected.1) true true", "\(policy)")
            #expect(try f.value(#"SELECT string_agg(email, ',' ORDER BY id) FROM public."user""#) == "\(expected.0),\(expected.1)")
            #expect(try f.digest(except: [1, 2]) == before)
            await f.pool.close()
        }
    }

    @Test("with the email in the legacy table, user_column references the legacy key")
    func emailColumn() async throws {
        let legacy = BatonConfiguration.Legacy(table: "public.accounts", keyColumn: "id", subjectColumn: "apple_sub", emailColumn: "email",
                                               emailCopies: [LegacyEmailCopy(table: "public.addresses", column: "address", userColumn: "account_id",
                                                                             filters: ["kind": "login"])])
        let url = try TestDatabase.create("copies_column")
        _ = try TestDatabase.psql(url, """
            CREATE TABLE public.accounts (id text PRIMARY KEY, apple_sub text UNIQUE, email text);
            CREATE TABLE public.addresses (id serial PRIMARY KEY, account_id text, kind text, address text);
            INSERT INTO public.accounts VALUES ('k1', 'old.1', '\(Self.old1)');
            INSERT INTO public.addresses (account_id, kind, address) VALUES ('k1', 'login', '\(Self.old1.uppercased())'), ('k1', 'billing', '\(Self.old1)');
            """)
        let pool = PostgresPool(url: url, maxConnections: 2)
        _ = try await BatonSchema.migrator().migrate(pool)
        let store = LegacyStore(pool: pool, legacy: try legacy.identifiers())
        let inspection = try await store.inspectLegacyTable()
        // No index leads with account_id: a warning with the statement that adds one.
        let finding = try #require(inspection.findings.first { $0.name == "email copy" })
        #expect(finding.status == .warning && finding.fix == #"CREATE INDEX CONCURRENTLY ON "public"."addresses" ("account_id")"#, "\(finding)")
        #expect(try await store.applyMigration(oldSub: "old.1", newSub: "new.1", newEmail: Self.new1, isPrivateEmail: true, transferSub: nil, method: .link)
                == .migrated(LegacyUser(key: "k1", subject: "new.1", email: Self.new1)))
        #expect(try TestDatabase.psql(url, "SELECT string_agg(kind || ' ' || address, ',' ORDER BY id) FROM public.addresses") == "login \(Self.new1),billing \(Self.old1)")
        await pool.close()
    }

    @Test("start-up: the copy's table and columns must exist, the email column be text, user_column compare with the key")
    func inspection() async throws {
        let f = try await CopyFixture("copies_inspect")
        try await f.pool.execute("CREATE TABLE public.badcopy (id serial, user_id uuid, email jsonb, note text)")
        let ok = try await f.store.validateLegacyTable().findings.first { $0.name == "email copy" }
        #expect(ok?.status == .ok && ok?.detail.contains("public.emailaddress.email, the user's rows by user_id = user.id") == true, "\(String(describing: ok))")
        let cases: [(LegacyEmailCopy, String)] = [
            (LegacyEmailCopy(table: "public.nothere", column: "email", userColumn: "user_id"), "legacy.email_copies[0].table public.nothere does not exist"),
            (LegacyEmailCopy(table: "public.badcopy", column: "mail", userColumn: "user_id"), "has no column mail (legacy.email_copies[0].column)"),
            (LegacyEmailCopy(table: "public.badcopy", column: "note", userColumn: "user_id", filters: ["kind": "x"]), "has no column kind (legacy.email_copies[0].where)"),
            (LegacyEmailCopy(table: "public.badcopy", column: "email", userColumn: "user_id"), "is of type jsonb, not text, varchar or citext"),
            (LegacyEmailCopy(table: "public.badcopy", column: "note", userColumn: "user_id"), "user_column user_id (uuid) cannot be compared with public.user.id"),
        ]
        for (copy, detail) in cases {
            let store = LegacyStore(pool: f.pool, legacy: try CopyFixture.legacy { $0.emailCopies = [copy] }.identifiers())
            let failure = try await store.inspectLegacyTable().failure
            #expect(failure?.name == "email copy" && failure?.detail.contains(detail) == true, "\(String(describing: failure))")
        }
        await f.pool.close()
    }

    @Test("rehearsal problems: a copy whose address another row holds, a copy holding a stale relay address")
    func problems() async throws {
        let f = try await CopyFixture("copies_problems")
        try await f.add(1, sub: "001234.0123456789abcdef0123456789abcdef.0001", email: Self.old1, addresses: [(Self.old1, true, true)])
        try await f.add(2, provider: "google", sub: "g.2", email: "g@example.org", addresses: [(Self.old1.uppercased(), false, false)])
        try await f.add(3, sub: "001234.0123456789abcdef0123456789abcdef.0003", email: "me@example.com",
                        addresses: [("me@example.com", true, true), ("x3@privaterelay.appleid.com", true, false)])
        let problems = try await f.store.findProblems()
        #expect(problems.first { $0.kind == .emailCopyConflict } == LegacyProblem(kind: .emailCopyConflict, count: 1, examples: ["1"]))
        #expect(problems.first { $0.kind == .emailCopyStale } == LegacyProblem(kind: .emailCopyStale, count: 1, examples: ["3"]))
        await f.pool.close()
    }

    @Test("configuration: copies need an email location, another table each, distinct columns; members are declared keys")
    func configuration() throws {
        let copy = LegacyEmailCopy(table: "public.emailaddress", column: "email", userColumn: "user_id")
        let refused: [(BatonConfiguration.Legacy, String)] = [
            (CopyFixture.legacy { $0.email = nil }, "legacy.email_copies"),
            (CopyFixture.legacy { $0.emailCopies = [LegacyEmailCopy(table: "public.user", column: "email", userColumn: "id")] }, "legacy.email_copies[0].table"),
            (CopyFixture.legacy { $0.emailCopies = [LegacyEmailCopy(table: "public.identity", column: "uid", userColumn: "id")] }, "legacy.email_copies[0].table"),
            (CopyFixture.legacy { $0.emailCopies = [copy, copy] }, "legacy.email_copies[1].table"),
            (CopyFixture.legacy { $0.emailCopies = [LegacyEmailCopy(table: "public.emailaddress", column: "email", userColumn: "email")] }, "legacy.email_copies[0]"),
            (CopyFixture.legacy { $0.emailCopies = [LegacyEmailCopy(table: "public.emailaddress", column: "email", userColumn: "user_id", filters: ["email": "x"])] }, "legacy.email_copies[0]"),
            (CopyFixture.legacy { $0.emailCopies = [LegacyEmailCopy(table: "public.email address", column: "email", userColumn: "user_id")] }, "legacy.email_copies[0].table"),
        ]
        for (legacy, key) in refused {
            let error = #expect(throws: ConfigurationError.self) { try legacy.identifiers() }
            #expect(error?.key == key, "\(String(describing: error))")
        }
    }
}

@Suite("legacy.json.email_table_column: the users row's JSON copy follows where it holds the old values")
struct LegacyUsersJSONCopyTests {
    static let old1 = "a1@privaterelay.appleid.com", new1 = "b1@privaterelay.appleid.com"

    /// Supabase's shape: `identities.identity_data` and `users.meta` both copy the claims; user 2 last signed in
    /// with another provider, whose claims are in `users.meta`.
    private static func fixture(_ name: String, policy: EmailPolicy = .relay) async throws -> (url: String, pool: PostgresPool, store: LegacyStore) {
        let url = try TestDatabase.create(name)
        _ = try TestDatabase.psql(url, """
            CREATE TABLE public.users (id text PRIMARY KEY, email text UNIQUE, meta jsonb);
            CREATE TABLE public.identities (id text PRIMARY KEY, provider text, provider_id text, user_id text REFERENCES public.users (id),
                identity_data jsonb, UNIQUE (provider_id, provider));
            INSERT INTO public.users VALUES
                ('u1', '\(old1)', '{"sub": "old.1", "provider_id": "old.1", "email": "\(old1)", "name": "n", "custom_claims": {"sub": "old.1"}}'),
                ('u2', 'a2@privaterelay.appleid.com', '{"sub": "g.2", "provider_id": "g.2", "email": "me@gmail.com"}');
            INSERT INTO public.identities VALUES
                ('i1', 'apple', 'old.1', 'u1', '{"sub": "old.1", "provider_id": "old.1", "email": "\(old1)"}'),
                ('i2', 'apple', 'old.2', 'u2', '{"sub": "old.2", "provider_id": "old.2", "email": "a2@privaterelay.appleid.com"}'),
                ('g2', 'google', 'g.2', 'u2', '{"sub": "g.2", "email": "me@gmail.com"}');
            """)
        let pool = PostgresPool(url: url, maxConnections: 2)
        _ = try await BatonSchema.migrator().migrate(pool)
        let legacy = BatonConfiguration.Legacy(
            table: "public.identities", keyColumn: "id", subjectColumn: "provider_id", emailColumn: nil, filters: ["provider": "apple"],
            email: LegacyEmailTable(table: "public.users", column: "email", keyColumn: "id", referenceColumn: "user_id"),
            json: LegacyJSONCopy(column: "identity_data", subjectKeys: ["sub", "provider_id"], emailKeys: ["email"], emailTableColumn: "meta"),
            emailPolicy: policy)
        return (url, pool, LegacyStore(pool: pool, legacy: try legacy.identifiers()))
    }

    @Test("a migration rewrites the users row's keys holding the old subject and email; another provider's claims there are kept")
    func migration() async throws {
        let (url, pool, store) = try await Self.fixture("users_json")
        let inspection = try await store.validateLegacyTable()
        #expect(inspection.findings.first { $0.name == "json copy" }?.detail.contains("(and in public.users.meta, where they hold the old values)") == true)
        #expect(try await store.applyMigration(oldSub: "old.1", newSub: "new.1", newEmail: Self.new1, isPrivateEmail: true, transferSub: nil, method: .exchange)
                == .migrated(LegacyUser(key: "i1", subject: "new.1", email: Self.new1, accountKey: "u1")))
        #expect(try await store.applyMigration(oldSub: "old.2", newSub: "new.2", newEmail: "b2@privaterelay.appleid.com", isPrivateEmail: true, transferSub: nil, method: .exchange)
                == .migrated(LegacyUser(key: "i2", subject: "new.2", email: "b2@privaterelay.appleid.com", accountKey: "u2")))
        #expect(try TestDatabase.psql(url, "SELECT string_agg(id || ' ' || email || ' ' || meta::text, ';' ORDER BY id) FROM public.users") == """
            u1 \(Self.new1) {"sub": "new.1", "name": "n", "email": "\(Self.new1)", "provider_id": "new.1", "custom_claims": {"sub": "old.1"}};\
            u2 b2@privaterelay.appleid.com {"sub": "g.2", "email": "me@gmail.com", "provider_id": "g.2"}
            """)
        // A current user's new relay address reaches the users row's email key too; the subject keys stay.
        _ = try await store.updateEmail(of: LegacyUser(key: "i1", subject: "new.1", email: Self.new1), to: "c1@privaterelay.appleid.com")
        #expect(try TestDatabase.psql(url, "SELECT meta->>'email' || ' ' || (meta->>'sub') FROM public.users WHERE id = 'u1'") == "c1@privaterelay.appleid.com new.1")
        await pool.close()
    }

    @Test("under email_policy never the users row's subject keys still follow, its email keys stay")
    func never() async throws {
        let (url, pool, store) = try await Self.fixture("users_json_never", policy: .never)
        _ = try await store.applyMigration(oldSub: "old.1", newSub: "new.1", newEmail: Self.new1, isPrivateEmail: true, transferSub: nil, method: .signin)
        #expect(try TestDatabase.psql(url, "SELECT email || ' ' || (meta->>'email') || ' ' || (meta->>'sub') || ' ' || (meta->>'provider_id') FROM public.users WHERE id = 'u1'")
                == "\(Self.old1) \(Self.old1) new.1 new.1")
        await pool.close()
    }

    @Test("email_table_column needs legacy.email and a column other than its email column")
    func configuration() throws {
        var legacy = BatonConfiguration.Legacy(table: "public.identities", keyColumn: "id", subjectColumn: "provider_id", emailColumn: "mail",
                                               json: LegacyJSONCopy(column: "identity_data", emailTableColumn: "meta"))
        #expect((#expect(throws: ConfigurationError.self) { try legacy.identifiers() })?.key == "legacy.json.email_table_column")
        legacy.emailColumn = nil
        legacy.email = LegacyEmailTable(table: "public.users", column: "meta", keyColumn: "id", referenceColumn: "user_id")
        #expect((#expect(throws: ConfigurationError.self) { try legacy.identifiers() })?.key == "legacy.json.email_table_column")
    }
}
