import Foundation
import TestSupport
import Testing

/// Hanko: `identities (provider_user_id, provider_id, data text, email_id, user_id, tenant_id)` unique on
/// `(tenant_id, provider_user_id, provider_id)`; the email in `emails.address` (the row `identities.email_id` names),
/// unique per tenant; `users` holds no email. As teamhanko/hanko's migrations in backend/persistence/migrations
/// leave them at commit f742d49 (2026-08-14): 20230112152816_create_identities, 20250130154010_change_identities,
/// 20251104000000_add_user_id_to_identities, 20260217162500_add_tenant_id,
/// 20260618132411_change_identities_unique_index (fizz names: `<table>_<columns>_idx`, `<table>_<ref>_id_fk`).
/// A second tenant holds Apple rows with the Apple users' old identifiers; Google rows in the first hold their new ones.
extension Framework {
    static let hankoTenant = "00000000-0000-0000-0000-000000000001"
    static let hankoOtherTenant = "00000000-0000-0000-0000-000000000002"

    static var hanko: Framework { Framework(
        name: "hanko",
        ddl: """
            CREATE TABLE tenants (id uuid NOT NULL, config json NULL, created_at timestamp NOT NULL, updated_at timestamp NOT NULL,
                CONSTRAINT tenants_pkey PRIMARY KEY (id));
            CREATE TABLE users (id uuid NOT NULL, created_at timestamp NOT NULL, updated_at timestamp NOT NULL,
                name varchar(255) NULL, family_name varchar(255) NULL, given_name varchar(255) NULL, picture text NULL,
                tenant_id uuid NULL DEFAULT '00000000-0000-0000-0000-000000000001', CONSTRAINT users_pkey PRIMARY KEY (id));
            CREATE INDEX users_tenant_id_idx ON users (tenant_id);
            CREATE UNIQUE INDEX users_tenant_id_id_idx ON users (tenant_id, id);
            ALTER TABLE users ADD CONSTRAINT users_tenants_id_fk FOREIGN KEY (tenant_id) REFERENCES tenants (id) ON DELETE CASCADE ON UPDATE CASCADE;
            CREATE TABLE emails (id uuid NOT NULL, user_id uuid NULL, address varchar(255) NOT NULL, verified bool NOT NULL,
                created_at timestamp NOT NULL, updated_at timestamp NOT NULL,
                tenant_id uuid NULL DEFAULT '00000000-0000-0000-0000-000000000001', CONSTRAINT emails_pkey PRIMARY KEY (id));
            ALTER TABLE emails ADD CONSTRAINT emails_users_id_fk FOREIGN KEY (user_id) REFERENCES users (id) ON DELETE CASCADE ON UPDATE CASCADE;
            CREATE INDEX emails_tenant_id_idx ON emails (tenant_id);
            CREATE UNIQUE INDEX emails_tenant_id_id_idx ON emails (tenant_id, id);
            CREATE UNIQUE INDEX emails_tenant_id_address_idx ON emails (tenant_id, address);
            ALTER TABLE emails ADD CONSTRAINT emails_tenants_id_fk FOREIGN KEY (tenant_id) REFERENCES tenants (id) ON DELETE CASCADE ON UPDATE CASCADE;
            ALTER TABLE emails ADD CONSTRAINT emails_tenant_user_fkey FOREIGN KEY (tenant_id, user_id) REFERENCES users(tenant_id, id) ON DELETE CASCADE ON UPDATE CASCADE;
            CREATE TABLE primary_emails (id uuid NOT NULL, email_id uuid NOT NULL, user_id uuid NOT NULL,
                created_at timestamp NOT NULL, updated_at timestamp NOT NULL,
                tenant_id uuid NULL DEFAULT '00000000-0000-0000-0000-000000000001', CONSTRAINT primary_emails_pkey PRIMARY KEY (id));
            CREATE UNIQUE INDEX primary_emails_email_id_idx ON primary_emails (email_id);
            CREATE UNIQUE INDEX primary_emails_user_id_idx ON primary_emails (user_id);
            ALTER TABLE primary_emails ADD CONSTRAINT primary_emails_emails_id_fk FOREIGN KEY (email_id) REFERENCES emails (id) ON DELETE RESTRICT ON UPDATE CASCADE;
            ALTER TABLE primary_emails ADD CONSTRAINT primary_emails_users_id_fk FOREIGN KEY (user_id) REFERENCES users (id) ON DELETE CASCADE ON UPDATE CASCADE;
            CREATE INDEX primary_emails_tenant_id_idx ON primary_emails (tenant_id);
            ALTER TABLE primary_emails ADD CONSTRAINT primary_emails_tenants_id_fk FOREIGN KEY (tenant_id) REFERENCES tenants (id) ON DELETE CASCADE ON UPDATE CASCADE;
            ALTER TABLE primary_emails ADD CONSTRAINT primary_emails_tenant_email_fkey FOREIGN KEY (tenant_id, email_id) REFERENCES emails(tenant_id, id) ON DELETE RESTRICT ON UPDATE CASCADE;
            ALTER TABLE primary_emails ADD CONSTRAINT primary_emails_tenant_user_fkey FOREIGN KEY (tenant_id, user_id) REFERENCES users(tenant_id, id) ON DELETE CASCADE ON UPDATE CASCADE;
            CREATE TABLE identities (id uuid NOT NULL, provider_user_id varchar(255) NOT NULL, provider_id varchar(255) NOT NULL,
                data text NULL, email_id uuid NULL, created_at timestamp NOT NULL, updated_at timestamp NOT NULL, user_id uuid NULL,
                tenant_id uuid NULL DEFAULT '00000000-0000-0000-0000-000000000001', CONSTRAINT identities_pkey PRIMARY KEY (id));
            ALTER TABLE identities ADD CONSTRAINT identities_emails_id_fk FOREIGN KEY (email_id) REFERENCES emails (id) ON DELETE CASCADE;
            ALTER TABLE identities ADD CONSTRAINT identities_users_id_fk FOREIGN KEY (user_id) REFERENCES users (id) ON DELETE CASCADE;
            CREATE INDEX identities_tenant_id_idx ON identities (tenant_id);
            CREATE UNIQUE INDEX identities_tenant_id_id_idx ON identities (tenant_id, id);
            ALTER TABLE identities ADD CONSTRAINT identities_tenants_id_fk FOREIGN KEY (tenant_id) REFERENCES tenants (id) ON DELETE CASCADE ON UPDATE CASCADE;
            ALTER TABLE identities ADD CONSTRAINT identities_tenant_email_fkey FOREIGN KEY (tenant_id, email_id) REFERENCES emails(tenant_id, id) ON DELETE CASCADE;
            ALTER TABLE identities ADD CONSTRAINT identities_tenant_user_fkey FOREIGN KEY (tenant_id, user_id) REFERENCES users(tenant_id, id) ON DELETE CASCADE;
            CREATE UNIQUE INDEX identities_tenant_id_provider_user_id_provider_id_idx ON identities (tenant_id, provider_user_id, provider_id);
            INSERT INTO tenants VALUES ('\(hankoTenant)', '{}', '2026-01-01 00:00:00', '2026-01-01 00:00:00'),
                                       ('\(hankoOtherTenant)', '{}', '2026-02-01 00:00:00', '2026-02-01 00:00:00');

            """,
        addApple: { i, sub, email in hankoUser(name: "apple\(i)", tenant: hankoTenant, provider: "apple", sub: sub, email: email) },
        // Even users: Apple rows of the second tenant (the old identifiers); odd ones and the rest: Google rows of the first.
        addOther: { i, uid, email in
            i % 2 == 0 && i < 100
                ? hankoUser(name: "tenant2-\(i)", tenant: hankoOtherTenant, provider: "apple", sub: uid, email: email)
                : hankoUser(name: "google\(i)", tenant: hankoTenant, provider: "google", sub: uid, email: email)
        },
        appleRow: { i in
            """
            SELECT i.provider_user_id || '|' || e.address || '|' || i.data
            FROM identities i JOIN users u ON u.id = i.user_id JOIN emails e ON e.id = i.email_id WHERE u.name = 'apple\(i)'
            """
        },
        setEmail: { i, email in "UPDATE emails SET address = '\(email)' FROM users u WHERE u.id = emails.user_id AND u.name = 'apple\(i)'" },
        invariant: """
            SELECT md5(string_agg(x, '|' ORDER BY x)) FROM (
                SELECT i::text AS x FROM identities i WHERE i.provider_id <> 'apple' OR i.tenant_id <> '\(hankoTenant)'
                UNION ALL SELECT (to_jsonb(i) - 'provider_user_id' - 'data')::text || (i.data::jsonb - 'sub' - 'email')::text
                          FROM identities i WHERE i.provider_id = 'apple' AND i.tenant_id = '\(hankoTenant)'
                UNION ALL SELECT e::text FROM emails e WHERE e.id NOT IN (SELECT email_id FROM identities WHERE provider_id = 'apple' AND tenant_id = '\(hankoTenant)')
                UNION ALL SELECT (to_jsonb(e) - 'address')::text FROM emails e
                UNION ALL SELECT u::text FROM users u
                UNION ALL SELECT p::text FROM primary_emails p
                UNION ALL SELECT t::text FROM tenants t
            ) AS rows
            """,
        jsonSubjectKeys: ["sub"]
    ) }

    /// A Hanko user with a primary email and an identity, as Hanko's third-party sign-up leaves them.
    private static func hankoUser(name: String, tenant: String, provider: String, sub: String, email: String) -> String {
        """
        WITH u AS (INSERT INTO users (id, created_at, updated_at, name, tenant_id)
                   VALUES (gen_random_uuid(), '2025-01-01 00:00:00', '2025-01-01 00:00:00', '\(name)', '\(tenant)') RETURNING id),
             e AS (INSERT INTO emails (id, user_id, address, verified, created_at, updated_at, tenant_id)
                   SELECT gen_random_uuid(), id, '\(email)', true, '2025-01-01 00:00:00', '2025-01-01 00:00:00', '\(tenant)' FROM u RETURNING id, user_id),
             p AS (INSERT INTO primary_emails (id, email_id, user_id, created_at, updated_at, tenant_id)
                   SELECT gen_random_uuid(), id, user_id, '2025-01-01 00:00:00', '2025-01-01 00:00:00', '\(tenant)' FROM e)
        INSERT INTO identities (id, provider_user_id, provider_id, data, email_id, created_at, updated_at, user_id, tenant_id)
        SELECT gen_random_uuid(), '\(sub)', '\(provider)',
               '{"email":"\(email)","email_verified":true,"iss":"\(provider == "apple" ? "https://appleid.apple.com" : "https://accounts.google.com")","sub":"\(sub)"}',
               id, '2025-01-01 00:00:00', '2025-01-01 00:00:00', user_id, '\(tenant)' FROM e
        """
    }
}

@Suite("Hanko tables, through the built binary")
struct SchemaHankoTests {
    @Test("sign-ins, concurrent first sign-ins, email conflicts, unmatched, exchange, report; other rows and tenants untouched")
    func scenario() async throws {
        try await SchemaScenario.run(.hanko)
    }

    /// Hanko's `identityPersister.Get` (backend/persistence/identity_persister.go): `provider_user_id`, `provider_id`
    /// and `tenant_id`, then the identity's `user_id`.
    @Test("Hanko's own lookup finds each Apple user under the new subject as the same user, in its tenant only")
    func lookup() async throws {
        try await ServerLookup(
            apple: { "SELECT user_id FROM identities WHERE provider_user_id = '\($0)' AND provider_id = 'apple' AND tenant_id = '\(Framework.hankoTenant)'" },
            other: { "SELECT user_id FROM identities WHERE provider_user_id = '\($0)' AND provider_id = 'apple' AND tenant_id = '\(Framework.hankoOtherTenant)'" }
        ).run(.hanko)
    }

    @Test("exchange records the pair, report lists it, merge moves the identifier; other rows and tenants untouched")
    func merge() async throws {
        try await MergeScenario.run(.hanko)
    }
}
