import Foundation
import TestSupport
import Testing

/// Directus: one table for every user, `directus_users`, whose `provider` names the auth provider (`default` for
/// email and password, else the name in `AUTH_PROVIDERS`) and whose `external_identifier` holds the provider's
/// identifier (for the `openid` driver the `sub`, for `ldap` the user's DN), unique on its own across every provider
/// (`directus_users_external_identifier_unique`); the email beside it, unique. As directus/directus's knex migrations leave the table
/// (api/src/database/seeds/01-tables/03-users.yaml, then the migrations up to 20250718A-add-direction (`text_direction`),
/// among them 20210903A-add-auth-provider (`provider`, `external_identifier` and its unique constraint, `email`
/// nullable), 20211009A-add-auth-data, 20211118A-add-notifications (`email_notifications`); knex names:
/// `<table>_<column>_unique`, `<table>_<column>_foreign`), as a pg_dump of a Directus 11 database shows it.
/// `directus_roles` is reduced to the columns the rows need. LDAP users hold DNs made of the Apple users' old
/// identifiers (no other row can hold the identifier itself: the unique constraint spans every provider); Google
/// users (`AUTH_GOOGLE_IDENTIFIER_KEY=email`) hold their address; the administrator Directus creates has no identifier.
extension Framework {
    static let directusRole = "3b1c0c10-5b5a-4e2f-9c61-000000000001"

    static var directus: Framework { Framework(
        name: "directus",
        ddl: """
            CREATE TABLE directus_roles (id uuid NOT NULL, name varchar(100) NOT NULL, icon varchar(64) DEFAULT 'supervised_user_circle' NOT NULL,
                description text, parent uuid, CONSTRAINT directus_roles_pkey PRIMARY KEY (id));
            CREATE TABLE directus_users (
                id uuid NOT NULL,
                first_name varchar(50),
                last_name varchar(50),
                email varchar(128),
                password varchar(255),
                location varchar(255),
                title varchar(50),
                description text,
                tags json,
                avatar uuid,
                language varchar(255) DEFAULT NULL,
                tfa_secret varchar(255),
                status varchar(16) DEFAULT 'active' NOT NULL,
                role uuid,
                token varchar(255),
                last_access timestamp with time zone,
                last_page varchar(255),
                provider varchar(128) DEFAULT 'default' NOT NULL,
                external_identifier varchar(255),
                auth_data json,
                email_notifications boolean DEFAULT true,
                appearance varchar(255),
                theme_dark varchar(255),
                theme_light varchar(255),
                theme_light_overrides json,
                theme_dark_overrides json,
                text_direction varchar(255) DEFAULT 'auto' NOT NULL,
                CONSTRAINT directus_users_pkey PRIMARY KEY (id),
                CONSTRAINT directus_users_email_unique UNIQUE (email),
                CONSTRAINT directus_users_token_unique UNIQUE (token),
                CONSTRAINT directus_users_external_identifier_unique UNIQUE (external_identifier),
                CONSTRAINT directus_users_role_foreign FOREIGN KEY (role) REFERENCES directus_roles (id) ON DELETE SET NULL);
            INSERT INTO directus_roles (id, name, icon, description) VALUES ('\(directusRole)', 'Member', 'supervised_user_circle', 'Signed up with SSO');
            INSERT INTO directus_users (id, email, password, status, role, provider, description)
                VALUES (gen_random_uuid(), 'admin@example.com', '$argon2id$v=19$m=65536,t=3,p=4$c2FsdA$aGFzaA', 'active', NULL, 'default', 'administrator');

            """,
        addApple: { i, sub, email in
            directusUser(description: "apple\(i)", provider: "apple", identifier: sub, email: email)
        },
        // Even users and the rest: LDAP users whose DN holds the string; odd ones: Google users identified by their address.
        addOther: { i, uid, email in
            i % 2 == 0 || i >= 100
                ? directusUser(description: "ldap\(i)", provider: "ldap", identifier: directusDN(uid), email: email)
                : directusUser(description: "google\(i)", provider: "google", identifier: email, email: email)
        },
        appleRow: { i in
            "SELECT coalesce(external_identifier, '') || '|' || coalesce(email, '') || '|{}' FROM directus_users WHERE description = 'apple\(i)'"
        },
        setEmail: { i, email in "UPDATE directus_users SET email = '\(email)' WHERE description = 'apple\(i)'" },
        // Of the Apple users only `external_identifier` and `email` may change.
        invariant: """
            SELECT md5(string_agg(x, '|' ORDER BY x)) FROM (
                SELECT to_jsonb(u)::text AS x FROM directus_users u WHERE u.provider <> 'apple'
                UNION ALL SELECT (to_jsonb(u) - 'external_identifier' - 'email')::text FROM directus_users u WHERE u.provider = 'apple'
                UNION ALL SELECT to_jsonb(r)::text FROM directus_roles r
            ) AS rows
            """
    ) }

    /// The DN Directus' LDAP driver keeps in `external_identifier` for the directory entry `cn=<name>`.
    static func directusDN(_ name: String) -> String { "cn=\(name),ou=users,dc=example,dc=org" }

    /// A user as Directus' `openid` (or `ldap`) driver creates it on a first login (`usersService.createOne` with the
    /// provider, the identifier, the email and the default role; `auth_data` the provider's refresh token), then signed in once.
    private static func directusUser(description: String, provider: String, identifier: String, email: String) -> String {
        """
        INSERT INTO directus_users (id, email, status, role, provider, external_identifier, auth_data, description, last_access, last_page)
        VALUES (gen_random_uuid(), '\(email)', 'active', '\(directusRole)', '\(provider)', '\(identifier)',
                '{"refreshToken":"r-\(description)"}', '\(description)', '2026-10-01 12:00:00+00', '/content')
        """
    }
}

@Suite("Directus users of several providers, through the built binary")
struct SchemaDirectusTests {
    @Test("sign-ins, concurrent first sign-ins, email conflicts, unmatched, exchange, report; other rows untouched")
    func scenario() async throws {
        try await SchemaScenario.run(.directus)
    }

    /// Directus' `fetchUserId` (api/src/auth/drivers/openid.ts; the same in oauth2.ts and saml.ts), as knex runs it: by
    /// the lower-cased identifier alone, whatever the provider, with no index on `LOWER(external_identifier)`.
    static let fetchUserId: @Sendable (String) -> String = {
        "SELECT id FROM directus_users WHERE LOWER(external_identifier) = lower('\($0)') LIMIT 1"
    }

    /// Baton compares the identifier exactly and Directus ignores case: they agree as long as no two identifiers differ
    /// in case only, which Apple's (digits, lower-case hex and dots) never do.
    @Test("Directus' own lookup finds each Apple user under the new subject as the same user, no longer under the old")
    func lookup() async throws {
        let lookup = Self.fetchUserId
        try await ServerLookup(apple: lookup, other: { lookup(Framework.directusDN($0)) }) { world in
            for person in world.people {
                let email = try world.claims(try world.token(person.id))["email"]!.stringValue!
                #expect(try world.psql("SELECT email FROM directus_users WHERE id = (\(lookup(person.newSub)))") == email)
            }
        }.run(.directus)
    }

    @Test("exchange records the duplicate, report lists it, merge releases its external_identifier to NULL and Directus finds the original user")
    func merge() async throws {
        try await ReleaseMerge(lookup: Self.fetchUserId, rows: "SELECT u::text FROM directus_users u", releasedTo: nil, leavesAppleRows: false).run(.directus)
    }

    @Test("rehearse: every Apple user migrates in the copy, no problem found, the source unchanged")
    func rehearse() async throws {
        try await SchemaRehearsal.run(.directus)
    }

    @Test("doctor accepts Directus' unique constraint on external_identifier alone")
    func doctor() async throws {
        try await SchemaWorld.run(.directus, apple: 1) { world in
            let doctor = try await runBatonOffPool(["doctor", "--config", try world.configuration()])
            #expect(doctor.status == 0 && !doctor.stdout.contains("FAIL"), "\(doctor.stdout)")
            #expect(doctor.stdout.contains("ok    subject uniqueness: unique index directus_users_external_identifier_unique on (external_identifier)"), "\(doctor.stdout)")
            #expect(doctor.stdout.contains("ok    key uniqueness: unique index directus_users_pkey on (id)"), "\(doctor.stdout)")
        }
    }
}
