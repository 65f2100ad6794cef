import Baton
import BatonPostgres
import Foundation
import TestSupport
import Testing

/// A database with Baton's schema and `ddl`, and a store over `legacy`.
private struct LocationFixture {
    let url: String
    let pool: PostgresPool
    let store: LegacyStore

    init(_ name: String, ddl: String, legacy: BatonConfiguration.Legacy) async throws {
        url = try TestDatabase.create(name)
        _ = try TestDatabase.psql(url, ddl)
        pool = PostgresPool(url: url, maxConnections: 2)
        _ = try await BatonSchema.migrator().migrate(pool)
        store = LegacyStore(pool: pool, legacy: try legacy.identifiers())
    }

    func value(_ sql: String) throws -> String { try TestDatabase.psql(url, sql) }

    /// Every row of `table` as text, in `order`, with the members `except` left out: what must not change.
    func rows(_ table: String, except: [String], order: String = "id") throws -> String {
        let dropped = except.map { " - '\($0)'" }.joined()
        return try value("SELECT string_agg((to_jsonb(t)\(dropped))::text, E'\\n' ORDER BY t.\(order)) FROM \(table) AS t")
    }
}

@Suite("Email locations: derived columns in the same row, and email copies at a JSON path")
struct LegacyEmailLocationsTests {
    static let old1 = "a1@privaterelay.appleid.com", new1 = "b1@privaterelay.appleid.com"
    static let realm = "realm-1", otherRealm = "realm-2"

    // MARK: Keycloak: user_entity.email with email_constraint beside it

    /// Keycloak's two tables (jpa-changelog, as in Tests/CLITests/SchemaKeycloakTests.swift), reduced to the columns
    /// that matter here; users 1 and 2 are Apple users of the first realm, 3 the same old `sub` in the second realm,
    /// 4 a Google user of the first realm whose address equals user 1's (no constraint: duplicates allowed for it).
    private static let keycloakDDL = """
        CREATE TABLE public.user_entity (id character varying(36) PRIMARY KEY, email character varying(255),
            email_constraint character varying(255), email_verified boolean DEFAULT false NOT NULL, first_name character varying(255),
            realm_id character varying(255), username character varying(255), created_timestamp bigint,
            CONSTRAINT uk_dykn684sl8up1crfei6eckhd7 UNIQUE (realm_id, email_constraint));
        CREATE TABLE public.federated_identity (identity_provider character varying(255) NOT NULL, realm_id character varying(36),
            federated_user_id character varying(255), federated_username character varying(255), token text,
            user_id character varying(36) NOT NULL REFERENCES public.user_entity (id), CONSTRAINT constraint_40 PRIMARY KEY (identity_provider, user_id));
        CREATE UNIQUE INDEX ON public.federated_identity (identity_provider, realm_id, federated_user_id);
        INSERT INTO public.user_entity VALUES
            ('u1', '\(old1)', '\(old1)', true, 'one', '\(realm)', 'apple1', 1700000000000),
            ('u2', 'me@example.com', 'me@example.com', true, 'two', '\(realm)', 'apple2', 1700000000001),
            ('u3', '\(old1)', '\(old1)', true, 'three', '\(otherRealm)', 'apple3', 1700000000002),
            ('u4', '\(old1.uppercased())', 'u4-generated-id', false, 'four', '\(realm)', 'google4', 1700000000003);
        INSERT INTO public.federated_identity VALUES
            ('apple', '\(realm)', 'old.1', '\(old1)', NULL, 'u1'), ('apple', '\(realm)', 'old.2', 'me@example.com', NULL, 'u2'),
            ('apple', '\(otherRealm)', 'old.1', '\(old1)', NULL, 'u3'), ('google', '\(realm)', 'old.1', 'g', NULL, 'u4');
        """

    private static func keycloak(policy: EmailPolicy? = nil) -> BatonConfiguration.Legacy {
        BatonConfiguration.Legacy(table: "public.federated_identity", keyColumn: "user_id", subjectColumn: "federated_user_id", emailColumn: nil,
                                  filters: ["identity_provider": "apple", "realm_id": .equals(realm)],
                                  email: LegacyEmailTable(table: "public.user_entity", column: "email", keyColumn: "id", referenceColumn: "user_id",
                                                          derived: ["email_constraint": .same]),
                                  emailPolicy: policy)
    }

    @Test("Keycloak: email_constraint follows the email on a migration, a current user's refresh and a rollback; an address the user gave stays in both")
    func keycloakConstraint() async throws {
        let f = try await LocationFixture("locations_keycloak", ddl: Self.keycloakDDL, legacy: Self.keycloak())
        let emails = "SELECT string_agg(id || ' ' || email || ' ' || email_constraint, ',' ORDER BY id) FROM public.user_entity"
        let others = try f.rows("public.user_entity", except: ["email", "email_constraint"])
        #expect(try await f.store.applyMigration(oldSub: "old.1", newSub: "new.1", newEmail: Self.new1, isPrivateEmail: true, transferSub: nil, method: .exchange)
                == .migrated(LegacyUser(key: "u1", subject: "new.1", email: Self.new1, accountKey: "u1")))
        // Relay policy: user 2's own address is kept in both columns.
        #expect(try await f.store.applyMigration(oldSub: "old.2", newSub: "new.2", newEmail: "b2@privaterelay.appleid.com", isPrivateEmail: true,
                                                 transferSub: nil, method: .exchange)
                == .migrated(LegacyUser(key: "u2", subject: "new.2", email: "me@example.com", accountKey: "u2")))
        #expect(try f.value(emails) == "u1 \(Self.new1) \(Self.new1),u2 me@example.com me@example.com,u3 \(Self.old1) \(Self.old1),u4 \(Self.old1.uppercased()) u4-generated-id")

        // Apple's relay address changes: the refresh writes both.
        #expect(try await f.store.updateEmail(of: LegacyUser(key: "u1", subject: "new.1", email: Self.new1), to: "c1@privaterelay.appleid.com")?.email
                == "c1@privaterelay.appleid.com")
        #expect(try f.value("SELECT email || ' ' || email_constraint FROM public.user_entity WHERE id = 'u1'") == "c1@privaterelay.appleid.com c1@privaterelay.appleid.com")
        try await f.pool.execute("UPDATE public.user_entity SET email = \(Self.new1), email_constraint = \(Self.new1) WHERE id = 'u1'")

        // The rollback puts the old address back in both.
        let migration = try #require(try await f.store.migrations(legacyKey: "u1", since: nil).first)
        #expect(try await f.store.rollBack(migration) == .rolledBack)
        #expect(try f.value("SELECT email || ' ' || email_constraint FROM public.user_entity WHERE id = 'u1'") == "\(Self.old1) \(Self.old1)")
        #expect(try f.rows("public.user_entity", except: ["email", "email_constraint"]) == others)
        await f.pool.close()
    }

    @Test("Keycloak: another user of the realm holding the new address in email_constraint: the subject moves, both email columns keep the old address")
    func keycloakConstraintClash() async throws {
        let f = try await LocationFixture("locations_keycloak_clash", ddl: Self.keycloakDDL, legacy: Self.keycloak())
        try await f.pool.execute("UPDATE public.user_entity SET email_constraint = \(Self.new1) WHERE id = 'u4'")
        #expect(try await f.store.applyMigration(oldSub: "old.1", newSub: "new.1", newEmail: Self.new1, isPrivateEmail: true, transferSub: nil, method: .signin)
                == .migrated(LegacyUser(key: "u1", subject: "new.1", email: Self.old1, accountKey: "u1")))
        #expect(try f.value("SELECT email || ' ' || email_constraint FROM public.user_entity WHERE id = 'u1'") == "\(Self.old1) \(Self.old1)")
        #expect(try f.value("SELECT detail->>'sqlstate' FROM baton.events WHERE kind = 'email_conflict'") == "23505")
        await f.pool.close()
    }

    // MARK: Gitea: email_address.email with lower_email beside it

    /// Gitea's `user` and `email_address` (xorm's statements, as in Tests/CLITests/SchemaGiteaTests.swift, reduced) and
    /// `external_login_user`. User 1 migrates; user 2 holds another address whose lower case is user 3's new one.
    private static let giteaDDL = """
        CREATE TABLE "user" ("id" BIGSERIAL PRIMARY KEY NOT NULL, "lower_name" VARCHAR(255) NOT NULL, "name" VARCHAR(255) NOT NULL,
            "email" VARCHAR(255) NOT NULL, "login_name" VARCHAR(255) NULL);
        CREATE TABLE "email_address" ("id" BIGSERIAL PRIMARY KEY NOT NULL, "uid" BIGINT NOT NULL, "email" VARCHAR(255) NOT NULL,
            "lower_email" VARCHAR(255) NOT NULL, "is_activated" BOOL NULL, "is_primary" BOOL DEFAULT false NOT NULL);
        CREATE INDEX "IDX_email_address_uid" ON "email_address" ("uid");
        CREATE UNIQUE INDEX "UQE_email_address_email" ON "email_address" ("email");
        CREATE UNIQUE INDEX "UQE_email_address_lower_email" ON "email_address" ("lower_email");
        CREATE TABLE "external_login_user" ("external_id" VARCHAR(255) NOT NULL, "user_id" BIGINT NOT NULL, "login_source_id" BIGINT NOT NULL,
            "email" VARCHAR(255) NULL, PRIMARY KEY ("external_id", "login_source_id"));
        CREATE UNIQUE INDEX ON "external_login_user" ("login_source_id", "user_id");
        INSERT INTO "user" (lower_name, name, email, login_name) VALUES ('apple1', 'apple1', '\(old1)', 'old.1'),
            ('github2', 'github2', 'Other@Example.com', 'g2'), ('apple3', 'apple3', 'a3@privaterelay.appleid.com', 'old.3');
        INSERT INTO email_address (uid, email, lower_email, is_activated, is_primary) VALUES
            (1, '\(old1)', '\(old1)', true, true), (1, 'me1@example.com', 'me1@example.com', true, false),
            (2, 'Other@Example.com', 'other@example.com', true, true), (3, 'a3@privaterelay.appleid.com', 'a3@privaterelay.appleid.com', true, true);
        INSERT INTO external_login_user VALUES ('old.1', 1, 1, '\(old1)'), ('old.3', 3, 1, 'a3@privaterelay.appleid.com'), ('old.1', 2, 3, 'x');
        """

    @Test("Gitea: lower_email follows the copy lower-cased; a new address another row holds in lower_email keeps the copy's old one and records it")
    func giteaLowerEmail() async throws {
        let legacy = BatonConfiguration.Legacy(
            table: "public.external_login_user", keyColumn: "user_id", subjectColumn: "external_id", emailColumn: nil, filters: ["login_source_id": "1"],
            email: LegacyEmailTable(table: "public.user", column: "email", keyColumn: "id", referenceColumn: "user_id"),
            emailCopies: [LegacyEmailCopy(table: "public.email_address", column: "email", userColumn: "uid", derived: ["lower_email": .lower])])
        let f = try await LocationFixture("locations_gitea", ddl: Self.giteaDDL, legacy: legacy)
        let others = try f.rows("public.email_address", except: ["email", "lower_email"])
        let mixed = "B1@PrivateRelay.AppleID.com"
        #expect(try await f.store.applyMigration(oldSub: "old.1", newSub: "new.1", newEmail: mixed, isPrivateEmail: true, transferSub: nil, method: .exchange)
                == .migrated(LegacyUser(key: "1", subject: "new.1", email: mixed, accountKey: "1")))
        // User 3's new address is user 2's in lower case: the copy and its lower_email keep the old one (the unique index
        // on lower_email would refuse it), the users row takes it, an email_conflict names the copy.
        #expect(try await f.store.applyMigration(oldSub: "old.3", newSub: "new.3", newEmail: "OTHER@example.com", isPrivateEmail: false, transferSub: nil,
                                                 method: .exchange)
                == .migrated(LegacyUser(key: "3", subject: "new.3", email: "OTHER@example.com", accountKey: "3")))
        #expect(try f.value("SELECT string_agg(email || ' ' || lower_email, ',' ORDER BY id) FROM email_address")
                == "\(mixed) \(mixed.lowercased()),me1@example.com me1@example.com,Other@Example.com other@example.com,a3@privaterelay.appleid.com a3@privaterelay.appleid.com")
        #expect(try f.value("SELECT legacy_key || ' ' || (detail->>'copy') FROM baton.events WHERE kind = 'email_conflict'") == "3 public.email_address")
        #expect(try f.rows("public.email_address", except: ["email", "lower_email"]) == others)

        // A rollback puts the old address back in both columns.
        let migration = try #require(try await f.store.migrations(legacyKey: "1", since: nil).first)
        #expect(try await f.store.rollBack(migration) == .rolledBack)
        #expect(try f.value("SELECT email || ' ' || lower_email FROM email_address WHERE id = 1") == "\(Self.old1) \(Self.old1)")
        await f.pool.close()
    }

    // MARK: Email copies at a JSON path

    /// An accounts table with the email, `identities.traits` (Kratos' traits: the address at `["email"]`) and
    /// `links.data`, text holding a JSON array of linked logins (`[{"type": "apple"}, "email"]`).
    private static let jsonDDL = """
        CREATE TABLE public.accounts (id text PRIMARY KEY, apple_sub text UNIQUE, email text);
        CREATE TABLE public.identities (id serial PRIMARY KEY, account_id text NOT NULL, schema_id text, traits jsonb NOT NULL, state text);
        CREATE TABLE public.links (id serial PRIMARY KEY, account_id text NOT NULL, data text, note text);
        INSERT INTO public.accounts VALUES ('k1', 'old.1', '\(old1)'), ('k2', 'old.2', 'me@example.com'), ('k3', 'old.3', 'a3@privaterelay.appleid.com');
        INSERT INTO public.identities (account_id, schema_id, traits, state) VALUES
            ('k1', 'default', '{"email": "\(old1.uppercased())", "name": {"first": "A", "last": "B"}, "newsletter": true, "tags": [1, 2]}', 'active'),
            ('k2', 'default', '{"email": "me@example.com", "name": {"first": "C"}}', 'active'),
            ('k3', 'default', '{"name": {"first": "no email key"}}', 'active'),
            ('k3', 'default', '{"email": ["a3@privaterelay.appleid.com"]}', 'inactive');
        INSERT INTO public.links (account_id, data, note) VALUES
            ('k1', '[{"type": "google", "email": "\(old1)"}, {"type": "apple", "email": "\(old1)", "id": 7}, {"type": "apple", "email": "own@example.com"}, {"type": "apple"}, 5]', 'n1'),
            ('k1', '[]', 'empty'),
            ('k1', '{"type": "apple", "email": "\(old1)"}', 'an object, not an array'),
            ('k2', '[{"type": "apple", "email": "me@example.com"}]', 'n2');
        """

    private static func jsonLegacy(policy: EmailPolicy? = nil) -> BatonConfiguration.Legacy {
        BatonConfiguration.Legacy(table: "public.accounts", keyColumn: "id", subjectColumn: "apple_sub", emailColumn: "email", emailCopies: [
            LegacyEmailCopy(table: "public.identities", column: "traits", userColumn: "account_id", path: ["email"]),
            LegacyEmailCopy(table: "public.links", column: "data", userColumn: "account_id",
                            path: LegacyJSONPath([.element(member: "type", value: "apple"), .key("email")])),
        ], emailPolicy: policy)
    }

    @Test("a copy at a key path and at an array selector follows where it holds the old address (any case); every other key, element and column is kept, nothing added")
    func jsonPaths() async throws {
        let f = try await LocationFixture("locations_json", ddl: Self.jsonDDL, legacy: Self.jsonLegacy())
        let identities = try f.rows("public.identities", except: ["traits"]), links = try f.rows("public.links", except: ["data"])
        let traitsBefore = try f.value("SELECT string_agg(traits::text, E'\\n' ORDER BY id) FROM public.identities WHERE id > 1")
        #expect(try await f.store.applyMigration(oldSub: "old.1", newSub: "new.1", newEmail: Self.new1, isPrivateEmail: true, transferSub: nil, method: .signin)
                == .migrated(LegacyUser(key: "k1", subject: "new.1", email: Self.new1)))
        // jsonb's normal form: the text column is rewritten in it.
        #expect(try f.value("SELECT traits::text FROM public.identities WHERE id = 1")
                == #"{"name": {"last": "B", "first": "A"}, "tags": [1, 2], "email": "\#(Self.new1)", "newsletter": true}"#)
        #expect(try f.value("SELECT string_agg(data, E'\\n' ORDER BY id) FROM public.links WHERE account_id = 'k1'") == """
            [{"type": "google", "email": "\(Self.old1)"}, {"id": 7, "type": "apple", "email": "\(Self.new1)"}, {"type": "apple", "email": "own@example.com"}, {"type": "apple"}, 5]
            []
            {"type": "apple", "email": "\(Self.old1)"}
            """)
        #expect(try f.value("SELECT string_agg(traits::text, E'\\n' ORDER BY id) FROM public.identities WHERE id > 1") == traitsBefore)
        #expect(try f.rows("public.identities", except: ["traits"]) == identities)
        #expect(try f.rows("public.links", except: ["data"]) == links)

        // A user without the key, or with a non-string there: nothing added, nothing changed.
        #expect(try await f.store.applyMigration(oldSub: "old.3", newSub: "new.3", newEmail: "b3@privaterelay.appleid.com", isPrivateEmail: true,
                                                 transferSub: nil, method: .signin)
                == .migrated(LegacyUser(key: "k3", subject: "new.3", email: "b3@privaterelay.appleid.com")))
        #expect(try f.value("SELECT string_agg(traits::text, E'\\n' ORDER BY id) FROM public.identities WHERE id > 1") == traitsBefore)

        // The refresh of Apple's relay address follows at both paths; the rollback of the migration is refused
        // (the email changed since), so the test rolls back a second one.
        #expect(try await f.store.updateEmail(of: LegacyUser(key: "k1", subject: "new.1", email: Self.new1), to: "c1@privaterelay.appleid.com")?.email
                == "c1@privaterelay.appleid.com")
        #expect(try f.value("SELECT traits->>'email' FROM public.identities WHERE id = 1") == "c1@privaterelay.appleid.com")
        #expect(try f.value("SELECT data::jsonb->1->>'email' FROM public.links WHERE id = 1") == "c1@privaterelay.appleid.com")
        let migration = try #require(try await f.store.migrations(legacyKey: "k3", since: nil).first)
        #expect(try await f.store.rollBack(migration) == .rolledBack)
        #expect(try f.value("SELECT email FROM public.accounts WHERE id = 'k3'") == "a3@privaterelay.appleid.com")
        await f.pool.close()
    }

    @Test("a rollback puts the old address back at the path")
    func jsonPathRollback() async throws {
        let f = try await LocationFixture("locations_json_rollback", ddl: Self.jsonDDL, legacy: Self.jsonLegacy())
        let before = try f.rows("public.links", except: [])
        _ = try await f.store.applyMigration(oldSub: "old.1", newSub: "new.1", newEmail: Self.new1, isPrivateEmail: true, transferSub: nil, method: .signin)
        #expect(try f.rows("public.links", except: []) != before)
        let migration = try #require(try await f.store.migrations(legacyKey: "k1", since: nil).first)
        #expect(try await f.store.rollBack(migration) == .rolledBack)
        // The old address comes back as the migration's event recorded it (lower case), every other member as it was.
        #expect(try f.value("SELECT data::jsonb->1->>'email' FROM public.links WHERE id = 1") == Self.old1)
        #expect(try f.value("SELECT traits->>'email' FROM public.identities WHERE id = 1") == Self.old1)
        #expect(try f.value("SELECT (data::jsonb #- '{1,email}')::text FROM public.links WHERE id = 1")
                == (try f.value("SELECT ('\(try f.value("SELECT data FROM public.links WHERE id = 1"))'::jsonb #- '{1,email}')::text")))
        await f.pool.close()
    }

    @Test("relay policy: an address the user chose stays at the path; always replaces it; never writes nothing")
    func jsonPathPolicy() async throws {
        for policy in EmailPolicy.allCases {
            let f = try await LocationFixture("locations_json_\(policy.rawValue)", ddl: Self.jsonDDL, legacy: Self.jsonLegacy(policy: policy))
            let before = try f.rows("public.identities", except: []) + f.rows("public.links", except: [])
            let outcome = try await f.store.applyMigration(oldSub: "old.2", newSub: "new.2", newEmail: "b2@privaterelay.appleid.com", isPrivateEmail: true,
                                                           transferSub: nil, method: .exchange)
            let expected = policy == .always ? "b2@privaterelay.appleid.com" : "me@example.com"
            #expect(outcome == .migrated(LegacyUser(key: "k2", subject: "new.2", email: expected)), "\(policy)")
            #expect(try f.value("SELECT traits->>'email' FROM public.identities WHERE account_id = 'k2'") == expected, "\(policy)")
            #expect(try f.value("SELECT data::jsonb->0->>'email' FROM public.links WHERE account_id = 'k2'") == expected, "\(policy)")
            if policy != .always {
                #expect(try f.rows("public.identities", except: []) + f.rows("public.links", except: []) == before, "\(policy)")
            }
            await f.pool.close()
        }
    }

    @Test("start-up: a copy at a path needs a json, jsonb or text column; a derived column must exist")
    func inspection() async throws {
        let f = try await LocationFixture("locations_inspect", ddl: Self.jsonDDL + "ALTER TABLE public.links ADD COLUMN n integer;",
                                          legacy: Self.jsonLegacy())
        #expect(try await f.store.inspectLegacyTable().failure == nil)
        var legacy = Self.jsonLegacy()
        legacy.emailCopies?[1].column = "n"
        let wrongType = try await LegacyStore(pool: f.pool, legacy: try legacy.identifiers()).inspectLegacyTable().failure
        #expect(wrongType?.detail.contains("legacy.email_copies[1].column n is of type integer, not json, jsonb or text") == true, "\(String(describing: wrongType))")
        legacy = Self.jsonLegacy()
        legacy.emailDerived = ["email_lower": .lower]
        let missing = try await LegacyStore(pool: f.pool, legacy: try legacy.identifiers()).inspectLegacyTable().failure
        #expect(missing?.detail.contains("has no column legacy.email_derived email_lower") == true, "\(String(describing: missing))")
        await f.pool.close()
    }
}

@Suite("Configuration of the email locations: path and derived")
struct LegacyEmailLocationsConfigurationTests {
    /// A whole configuration whose `legacy` section has the accounts table's three names, then `members` (by default the email column).
    private func load(_ members: String = #""email_column": "email""#, environment: [String: String] = [:]) throws -> BatonConfiguration {
        let json = """
            {"database": {"url": "postgresql://baton@db.internal/app"}, "apple": {"client_ids": ["com.example.app"]},
             "legacy": {"table": "public.accounts", "key_column": "id", "subject_column": "apple_sub", \(members)}}
            """
        return try BatonConfiguration.load(json: Data(json.utf8), baseDirectory: "/srv/baton", environment: environment)
    }

    @Test("paths decode from strings and one-member objects, encode back, and read as #>> for keys only")
    func paths() throws {
        let decoded = try load(#""email_column": "email", "email_copies": [{"table": "public.links", "column": "data", "user_column": "account_id", "path": ["emails", {"type": "apple"}, "value"]}], "email_derived": {"email_lower": "lower"}"#).legacy
        let path = try #require(decoded.emailCopies?.first?.path)
        #expect(path.steps == [.key("emails"), .element(member: "type", value: "apple"), .key("value")])
        #expect(!path.isKeysOnly)
        #expect(String(decoding: try JSONEncoder().encode(path), as: UTF8.self) == #"["emails",{"type":"apple"},"value"]"#)
        #expect(decoded.emailDerived == ["email_lower": .lower])
        #expect(try decoded.identifiers().emailDerived.map(\.column.name) == ["email_lower"])
    }

    @Test("a bad path or derived column is refused under its key")
    func refused() throws {
        let copy = #""email_column": "email", "email_copies": [{"table": "public.links", "column": "data", "user_column": "account_id", "path": "#
        let cases: [(String, String)] = [
            (copy + "[]}]", "legacy.email_copies[0].path"),
            (copy + #"[{"type": "apple"}]}]"#, "legacy.email_copies[0].path"),
            (copy + #"[{"a": "b", "c": "d"}, "x"]}]"#, "legacy.email_copies[0].path"),
            (copy + #"[1, "x"]}]"#, "legacy.email_copies[0].path"),
            (copy + #"["$1"]}]"#, "legacy.email_copies[0].path"),
            (copy + #"["a", "b", "c", "d", "e", "f", "g"]}]"#, "legacy.email_copies[0].path"),
            (copy + #""email"}]"#, "legacy.email_copies[0].path"),
            (copy + #"["email"], "derived": {"account_id": "lower"}}]"#, "legacy.email_copies[0].derived.account_id"),
            (copy + #"["email"], "derived": {"x": "upper"}}]"#, "legacy.email_copies[0].derived"),
            (#""email_column": "email", "email_derived": {"email": "same"}"#, "legacy.email_derived.email"),
            (#""email_column": "email", "email_derived": {"apple_sub": "same"}"#, "legacy.email_derived.apple_sub"),
            (#""email_column": "email", "email_derived": {"bad name": "same"}"#, "legacy.email_derived"),
            (#""email_derived": {"e2": "same"}"#, "legacy.email_derived"),
            (#""email": {"table": "public.users", "column": "email", "key_column": "id", "reference_column": "user_id", "derived": {"id": "same"}}"#,
             "legacy.email.derived.id"),
        ]
        for (members, key) in cases {
            let error = #expect(throws: ConfigurationError.self, "\(members)") { try load(members) }
            #expect(error?.key == key, "\(members): \(String(describing: error))")
        }
    }

    @Test("the derived keys have their own variables, read as column=form pairs or the JSON object")
    func environment() throws {
        #expect(BatonConfiguration.environmentVariable(for: "legacy.email_derived") == "BATON_LEGACY_EMAIL_DERIVED")
        #expect(BatonConfiguration.environmentVariable(for: "legacy.email.derived") == "BATON_LEGACY_EMAIL_TABLE_DERIVED")
        #expect(try load(environment: ["BATON_LEGACY_EMAIL_DERIVED": "email_lower=lower"]).legacy.emailDerived == ["email_lower": .lower])
        let mail = #""email": {"table": "public.users", "column": "email", "key_column": "id", "reference_column": "user_id"}"#
        #expect(try load(mail, environment: ["BATON_LEGACY_EMAIL_TABLE_DERIVED": #"{"email_constraint": "same"}"#]).legacy.email?.derived == ["email_constraint": .same])
        let error = #expect(throws: ConfigurationError.self) { try load(environment: ["BATON_LEGACY_EMAIL_DERIVED": "email_lower=upper"]) }
        #expect(error?.key == "legacy.email_derived")
    }
}
