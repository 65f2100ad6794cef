import BatonJSON
import Foundation
import TestSupport
import Testing

/// SuperTokens (PostgreSQL plugin): `thirdparty_users (app_id, third_party_id, third_party_user_id, user_id, email,
/// time_joined)`, one row per user of an app, primary key `(app_id, user_id)`, a plain index over `(app_id, third_party_id,
/// third_party_user_id)`; and `thirdparty_user_to_tenant (app_id, tenant_id, user_id, third_party_id, third_party_user_id)`,
/// one row per tenant the user belongs to, unique on `(app_id, tenant_id, third_party_id, third_party_user_id)`. The
/// plugin creates its tables in code, no migration files: as supertokens/supertokens-postgresql-plugin's
/// `GeneralQueries.createTablesIfNotExists` runs them on a fresh database at tag v9.4.2 (2026-05-05; the last release
/// before v9.5's reservation tables), the statements of `GeneralQueries.getQueryToCreateAppsTable`, `…TenantsTable`,
/// `…AppIdToUserIdTable`, `…UsersTable` (`all_auth_recipe_users`, with the indexes created beside it and with the
/// passwordless table) and `ThirdPartyQueries.getQueryToCreateUsersTable`, `getQueryToThirdPartyUserEmailIndex`,
/// `getQueryToThirdPartyUserIdIndex`, `getQueryToCreateThirdPartyUserToTenantTable` and its index, with the default
/// schema `public` (unqualified names) and no table prefix. Then the unique index docs/schemas.md tells the operator to
/// run (without `CONCURRENTLY`, which the test's single transaction refuses). The app `public` has two tenants, every
/// other Apple user being shared into the second; a second app holds Apple users with the Apple users' old identifiers,
/// Google users of the first app their new ones.
extension Framework {
    static let supertokensSubjectIndex = #"CREATE UNIQUE INDEX ON "public"."thirdparty_users" ("app_id", "third_party_id", "third_party_user_id")"#

    static var supertokens: Framework { Framework(
        name: "supertokens",
        ddl: """
            CREATE TABLE IF NOT EXISTS apps (app_id VARCHAR(64) NOT NULL DEFAULT 'public',created_at_time BIGINT ,CONSTRAINT apps_pkey PRIMARY KEY(app_id) );
            CREATE TABLE IF NOT EXISTS tenants (app_id VARCHAR(64) NOT NULL DEFAULT 'public',tenant_id VARCHAR(64) NOT NULL DEFAULT 'public',created_at_time BIGINT ,CONSTRAINT tenants_pkey PRIMARY KEY(app_id, tenant_id) ,CONSTRAINT tenants_app_id_fkey FOREIGN KEY(app_id) REFERENCES apps (app_id) ON DELETE CASCADE);
            CREATE INDEX IF NOT EXISTS tenants_app_id_index ON tenants(app_id);
            CREATE TABLE IF NOT EXISTS app_id_to_user_id (app_id VARCHAR(64) NOT NULL DEFAULT 'public',user_id CHAR(36) NOT NULL,recipe_id VARCHAR(128) NOT NULL,primary_or_recipe_user_id CHAR(36) NOT NULL,is_linked_or_is_a_primary_user BOOLEAN NOT NULL DEFAULT FALSE,CONSTRAINT app_id_to_user_id_pkey PRIMARY KEY (app_id, user_id), CONSTRAINT app_id_to_user_id_primary_or_recipe_user_id_fkey FOREIGN KEY(app_id, primary_or_recipe_user_id) REFERENCES app_id_to_user_id (app_id, user_id) ON DELETE CASCADE,CONSTRAINT app_id_to_user_id_app_id_fkey FOREIGN KEY(app_id) REFERENCES apps (app_id) ON DELETE CASCADE);
            CREATE INDEX IF NOT EXISTS app_id_to_user_id_app_id_index ON app_id_to_user_id(app_id);
            CREATE INDEX IF NOT EXISTS app_id_to_user_id_primary_user_id_index ON app_id_to_user_id(primary_or_recipe_user_id, app_id);
            CREATE INDEX IF NOT EXISTS app_id_to_user_id_user_id_index ON app_id_to_user_id(user_id, app_id);
            CREATE TABLE IF NOT EXISTS all_auth_recipe_users (app_id VARCHAR(64) DEFAULT 'public',tenant_id VARCHAR(64) DEFAULT 'public',user_id CHAR(36) NOT NULL,primary_or_recipe_user_id CHAR(36) NOT NULL,is_linked_or_is_a_primary_user BOOLEAN NOT NULL DEFAULT FALSE,recipe_id VARCHAR(128) NOT NULL,time_joined BIGINT NOT NULL,primary_or_recipe_user_time_joined BIGINT NOT NULL,CONSTRAINT all_auth_recipe_users_pkey PRIMARY KEY (app_id, tenant_id, user_id),CONSTRAINT all_auth_recipe_users_tenant_id_fkey FOREIGN KEY(app_id, tenant_id) REFERENCES tenants (app_id, tenant_id) ON DELETE CASCADE,CONSTRAINT all_auth_recipe_users_primary_or_recipe_user_id_fkey FOREIGN KEY(app_id, primary_or_recipe_user_id) REFERENCES app_id_to_user_id (app_id, user_id) ON DELETE CASCADE,CONSTRAINT all_auth_recipe_users_user_id_fkey FOREIGN KEY(app_id, user_id) REFERENCES app_id_to_user_id (app_id, user_id) ON DELETE CASCADE);
            CREATE INDEX all_auth_recipe_users_pagination_index1 ON all_auth_recipe_users(app_id, tenant_id, primary_or_recipe_user_time_joined DESC, primary_or_recipe_user_id DESC);
            CREATE INDEX all_auth_recipe_users_pagination_index2 ON all_auth_recipe_users(app_id, tenant_id, primary_or_recipe_user_time_joined ASC, primary_or_recipe_user_id DESC);
            CREATE INDEX all_auth_recipe_users_pagination_index3 ON all_auth_recipe_users(recipe_id, app_id, tenant_id, primary_or_recipe_user_time_joined DESC, primary_or_recipe_user_id DESC);
            CREATE INDEX all_auth_recipe_users_pagination_index4 ON all_auth_recipe_users(recipe_id, app_id, tenant_id, primary_or_recipe_user_time_joined ASC, primary_or_recipe_user_id DESC);
            CREATE INDEX all_auth_recipe_users_primary_user_id_index ON all_auth_recipe_users(primary_or_recipe_user_id, app_id);
            CREATE INDEX all_auth_recipe_users_recipe_id_index ON all_auth_recipe_users(app_id, recipe_id, tenant_id);
            CREATE INDEX IF NOT EXISTS all_auth_recipe_user_id_index ON all_auth_recipe_users(user_id);
            CREATE INDEX IF NOT EXISTS all_auth_recipe_user_id_app_id_index ON all_auth_recipe_users(app_id, user_id);
            CREATE INDEX IF NOT EXISTS all_auth_recipe_user_app_id_index ON all_auth_recipe_users(app_id);
            CREATE INDEX IF NOT EXISTS all_auth_recipe_tenant_id_index ON all_auth_recipe_users(app_id, tenant_id);
            CREATE TABLE IF NOT EXISTS thirdparty_users (app_id VARCHAR(64) DEFAULT 'public',third_party_id VARCHAR(28) NOT NULL,third_party_user_id VARCHAR(256) NOT NULL,user_id CHAR(36) NOT NULL,email VARCHAR(256) NOT NULL,time_joined BIGINT NOT NULL,CONSTRAINT thirdparty_users_user_id_fkey FOREIGN KEY(app_id, user_id) REFERENCES app_id_to_user_id (app_id, user_id) ON DELETE CASCADE,CONSTRAINT thirdparty_users_pkey PRIMARY KEY (app_id, user_id));
            CREATE INDEX IF NOT EXISTS thirdparty_users_email_index ON thirdparty_users (app_id, email);
            CREATE INDEX IF NOT EXISTS thirdparty_users_thirdparty_user_id_index ON thirdparty_users (app_id, third_party_id, third_party_user_id);
            CREATE TABLE IF NOT EXISTS thirdparty_user_to_tenant (app_id VARCHAR(64) DEFAULT 'public',tenant_id VARCHAR(64) DEFAULT 'public',user_id CHAR(36) NOT NULL,third_party_id VARCHAR(28) NOT NULL,third_party_user_id VARCHAR(256) NOT NULL,CONSTRAINT thirdparty_user_to_tenant_third_party_user_id_key UNIQUE (app_id, tenant_id, third_party_id, third_party_user_id),CONSTRAINT thirdparty_user_to_tenant_pkey PRIMARY KEY (app_id, tenant_id, user_id),CONSTRAINT thirdparty_user_to_tenant_user_id_fkey FOREIGN KEY (app_id, tenant_id, user_id) REFERENCES all_auth_recipe_users(app_id, tenant_id, user_id) ON DELETE CASCADE);
            CREATE INDEX thirdparty_user_to_tenant_third_party_user_id_index ON thirdparty_user_to_tenant(app_id, tenant_id, third_party_id, third_party_user_id);
            \(supertokensSubjectIndex);
            INSERT INTO apps VALUES ('public', 1735689600000), ('app2', 1738368000000);
            INSERT INTO tenants VALUES ('public', 'public', 1735689600000), ('public', 'customer2', 1736000000000), ('app2', 'public', 1738368000000);

            """,
        addApple: { i, sub, email in
            supertokensUser(name: "apple\(i)", app: "public", tenants: i % 2 == 0 ? ["public", "customer2"] : ["public"], provider: "apple", sub: sub, email: email)
        },
        // Even users: Apple users of the second app (the old identifiers); odd ones and the rest: Google users of the first.
        addOther: { i, uid, email in
            i % 2 == 0 && i < 100
                ? supertokensUser(name: "app2-\(i)", app: "app2", tenants: ["public"], provider: "apple", sub: uid, email: email)
                : supertokensUser(name: "google\(i)", app: "public", tenants: ["public"], provider: "google", sub: uid, email: email)
        },
        appleRow: { i in
            "SELECT third_party_user_id || '|' || email || '|{}' FROM thirdparty_users WHERE app_id = 'public' AND user_id = \(supertokensID("public", "apple\(i)"))"
        },
        setEmail: { i, email in "UPDATE thirdparty_users SET email = '\(email)' WHERE app_id = 'public' AND user_id = \(supertokensID("public", "apple\(i)"))" },
        invariant: """
            SELECT md5(string_agg(x, '|' ORDER BY x)) FROM (
                SELECT t::text AS x FROM thirdparty_users t WHERE NOT (t.app_id = 'public' AND t.third_party_id = 'apple')
                UNION ALL SELECT (to_jsonb(t) - 'third_party_user_id' - 'email')::text FROM thirdparty_users t
                          WHERE t.app_id = 'public' AND t.third_party_id = 'apple'
                UNION ALL SELECT t::text FROM thirdparty_user_to_tenant t WHERE NOT (t.app_id = 'public' AND t.third_party_id = 'apple')
                UNION ALL SELECT (to_jsonb(t) - 'third_party_user_id')::text FROM thirdparty_user_to_tenant t
                          WHERE t.app_id = 'public' AND t.third_party_id = 'apple'
                UNION ALL SELECT a::text FROM all_auth_recipe_users a
                UNION ALL SELECT a::text FROM app_id_to_user_id a
                UNION ALL SELECT a::text FROM apps a
                UNION ALL SELECT t::text FROM tenants t
            ) AS rows
            """
    ) }

    /// SQL: the SuperTokens user id of `name` in `app`.
    static func supertokensID(_ app: String, _ name: String) -> String { "md5('\(app)/\(name)')::uuid::text" }

    /// A third-party user as SuperTokens' `ThirdPartyQueries.signUp` leaves it, then added to the further `tenants`
    /// (`addUserIdToTenant_Transaction`): its app-wide rows and one row per tenant.
    private static func supertokensUser(name: String, app: String, tenants: [String], provider: String, sub: String, email: String) -> String {
        let user = supertokensID(app, name)
        var statements = [
            """
            INSERT INTO app_id_to_user_id (app_id, user_id, primary_or_recipe_user_id, recipe_id) VALUES ('\(app)', \(user), \(user), 'thirdparty')
            """,
            """
            INSERT INTO thirdparty_users (app_id, third_party_id, third_party_user_id, user_id, email, time_joined)
            VALUES ('\(app)', '\(provider)', '\(sub)', \(user), '\(email)', 1735700000000)
            """,
        ]
        for tenant in tenants {
            statements.append("""
                INSERT INTO all_auth_recipe_users (app_id, tenant_id, user_id, primary_or_recipe_user_id, recipe_id, time_joined, primary_or_recipe_user_time_joined)
                VALUES ('\(app)', '\(tenant)', \(user), \(user), 'thirdparty', 1735700000000, 1735700000000)
                """)
            statements.append("""
                INSERT INTO thirdparty_user_to_tenant (app_id, tenant_id, user_id, third_party_id, third_party_user_id)
                VALUES ('\(app)', '\(tenant)', \(user), '\(provider)', '\(sub)')
                """)
        }
        return statements.joined(separator: ";\n")
    }

    /// SuperTokens' third-party sign-in in `tenant` of `app`, as SQL (supertokens-core's `ThirdParty.signInUpHelper`): the
    /// sign-up's insert into `thirdparty_user_to_tenant` fails on its unique constraint only when the tenant's row holds the
    /// subject (otherwise a new user is made), then `listPrimaryUsersByThirdPartyInfo` reads `thirdparty_users` app-wide
    /// (joined to `all_auth_recipe_users`) and keeps the user of that tenant. The user id, or empty.
    static func supertokensSignIn(app: String, tenant: String = "public") -> @Sendable (String) -> String {
        { sub in
            """
            SELECT DISTINCT all_users.primary_or_recipe_user_id FROM thirdparty_users AS tp
            JOIN all_auth_recipe_users AS all_users ON tp.app_id = all_users.app_id AND tp.user_id = all_users.user_id
            WHERE tp.app_id = '\(app)' AND tp.third_party_id = 'apple' AND tp.third_party_user_id = '\(sub)' AND all_users.tenant_id = '\(tenant)'
              AND EXISTS (SELECT 1 FROM thirdparty_user_to_tenant t
                          WHERE t.app_id = '\(app)' AND t.tenant_id = '\(tenant)' AND t.third_party_id = 'apple' AND t.third_party_user_id = '\(sub)')
            """
        }
    }
}

@Suite("SuperTokens tables with several tenants and apps, through the built binary")
struct SchemaSuperTokensTests {
    @Test("SuperTokens' own sign-in finds each Apple user under the new subject as the same user, in every tenant it belongs to; the tenant rows follow")
    func lookup() async throws {
        try await ServerLookup(apple: Framework.supertokensSignIn(app: "public"), other: Framework.supertokensSignIn(app: "app2")) { world in
            for (i, person) in world.people.enumerated() {
                let user = try world.psql(Framework.supertokensSignIn(app: "public")(person.newSub))
                let tenants = try world.psql("""
                    SELECT string_agg(tenant_id || '=' || third_party_user_id, ',' ORDER BY tenant_id) FROM thirdparty_user_to_tenant
                    WHERE app_id = 'public' AND user_id = '\(user)'
                    """)
                #expect(tenants == (i % 2 == 0 ? "customer2=\(person.newSub),public=\(person.newSub)" : "public=\(person.newSub)"), "\(tenants)")
                #expect(try world.psql(Framework.supertokensSignIn(app: "public", tenant: "customer2")(person.newSub)) == (i % 2 == 0 ? user : ""))
                #expect(try world.psql(Framework.supertokensSignIn(app: "public", tenant: "customer2")(person.oldSub)) == "")
                let email = try world.claims(try world.token(person.id))["email"]!.stringValue!
                #expect(try world.psql("SELECT email FROM thirdparty_users WHERE app_id = 'public' AND user_id = '\(user)'") == email)
            }
        }.run(.supertokens)
    }

    @Test("doctor passes; the sender's walk and the exchange migrate every Apple user with its tenant rows; the report counts them")
    func exchangeReport() async throws {
        try await SchemaWorld.run(.supertokens, apple: 3) { world in
            let config = try world.configuration()
            let doctor = try await runBatonOffPool(["doctor", "--config", config])
            #expect(doctor.status == 0 && !doctor.stdout.contains("FAIL"), "\(doctor.stdout)\(doctor.stderr)")
            #expect(doctor.stdout.contains("ok    apple rows: legacy.where selects 3 rows"), "\(doctor.stdout)")
            let before = try world.psql(Framework.supertokens.invariant)
            let ids = try await runBatonOffPool(["transfer-ids", "--yes", "--rate", "100", "--config", config])
            #expect(ids.status == 0 && ids.stdout.contains("done 3,"), "\(ids.stdout)\(ids.stderr)")
            let exchange = try await runBatonOffPool(["exchange", "--config", config])
            #expect(exchange.status == 0 && exchange.stdout.contains("done 3,"), "\(exchange.stdout)\(exchange.stderr)")
            let signIn = Framework.supertokensSignIn(app: "public")
            for person in world.people {
                #expect(try world.psql(signIn(person.newSub)) != "" && world.psql(signIn(person.oldSub)) == "")
            }
            let report = try await runBatonOffPool(["report", "--format", "json", "--config", config])
            let json = try JSON.parseObject(Array(report.stdout.utf8))
            #expect(json["totals"]?["migrated"]?.intValue == 3, "\(report.stdout.prefix(400))")
            #expect(try world.psql(Framework.supertokens.invariant) == before)
        }
    }

    @Test("the exchange then baton rollback: SuperTokens' sign-in finds each Apple user under the old sub again; every table back byte for byte, the tenant rows too")
    func rollback() async throws {
        try await ServerLookup(apple: Framework.supertokensSignIn(app: "public"), other: Framework.supertokensSignIn(app: "app2")).runRollback(.supertokens)
    }

    /// Without the index docs/schemas.md gives, `baton doctor` fails on the subject's uniqueness with that statement.
    @Test("doctor asks for the unique index docs/schemas.md gives")
    func index() async throws {
        try await MissingIndex(statement: Framework.supertokensSubjectIndex, failure: "FAIL  subject uniqueness").run(.supertokens)
    }

    @Test("doctor passes; exchange records the duplicate, report lists it, merge moves the identifier and its tenant rows; other tenants and apps untouched")
    func merge() async throws {
        try await ServerLookup(apple: Framework.supertokensSignIn(app: "public"), other: Framework.supertokensSignIn(app: "app2")).runMerge(.supertokens)
    }
}
