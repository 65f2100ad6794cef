import Foundation
import TestSupport
import Testing

/// Nhost's hasura-auth: `auth.user_providers (user_id, provider_id, provider_user_id, access_token, refresh_token)`
/// unique on `(provider_id, provider_user_id)`, uuid keys; the email in `auth.users.email`, of the domain `auth.email`
/// over citext, unique; a trigger stamps `updated_at` on every update of either table. As nhost/hasura-auth's
/// go/migrations/postgres leave them at commit 838f397 (2025-10-10): 00001_create-initial-tables (tables, foreign
/// keys, triggers, the providers and roles it inserts), 00002_custom-user-fields (`metadata`), 00006_setup-webauthn
/// (`webauthn_current_challenge`), 00017_drop_user_providers_user_id_provider_id_key, and the providers 00003, 00008, 00010
/// and 00018 add. Only the tables the Apple login
/// reads are created. Google rows hold the Apple users' old identifiers, GitHub rows their new ones.
extension Framework {
    static var nhost: Framework { Framework(
        name: "nhost",
        ddl: """
            CREATE EXTENSION IF NOT EXISTS citext WITH SCHEMA public;
            CREATE EXTENSION IF NOT EXISTS pgcrypto WITH SCHEMA public;
            CREATE SCHEMA auth;
            CREATE FUNCTION auth.set_current_timestamp_updated_at () RETURNS TRIGGER LANGUAGE plpgsql AS $$
            DECLARE
              _new record;
            BEGIN
              _new := new;
              _new. "updated_at" = now();
              RETURN _new;
            END;
            $$;
            CREATE DOMAIN auth.email AS public.citext CHECK (value ~ '^[a-zA-Z0-9.!#$%&''*+/=?^_`{|}~-]+@[a-zA-Z0-9](?:[a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?(?:\\.[a-zA-Z0-9](?:[a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?)*$');
            CREATE TABLE auth.user_providers (
              id uuid DEFAULT public.gen_random_uuid () NOT NULL PRIMARY KEY,
              created_at timestamp with time zone DEFAULT now() NOT NULL,
              updated_at timestamp with time zone DEFAULT now() NOT NULL,
              user_id uuid NOT NULL,
              access_token text NOT NULL,
              refresh_token text,
              provider_id text NOT NULL,
              provider_user_id text NOT NULL,
              UNIQUE (user_id, provider_id),
              UNIQUE (provider_id, provider_user_id)
            );
            CREATE TABLE auth.users (
              id uuid DEFAULT public.gen_random_uuid () NOT NULL PRIMARY KEY,
              created_at timestamp with time zone DEFAULT now() NOT NULL,
              updated_at timestamp with time zone DEFAULT now() NOT NULL,
              last_seen timestamp with time zone,
              disabled boolean DEFAULT false NOT NULL,
              display_name text DEFAULT '' NOT NULl,
              avatar_url text DEFAULT '' NOT NULL,
              locale varchar(2) NOT NULL,
              email auth.email UNIQUE,
              phone_number text UNIQUE,
              password_hash text,
              email_verified boolean DEFAULT FALSE NOT NULL,
              phone_number_verified boolean DEFAULT FALSE NOT NULL,
              new_email auth.email,
              otp_method_last_used text,
              otp_hash text,
              otp_hash_expires_at timestamp with time zone DEFAULT now() NOT NULL,
              default_role text DEFAULT 'user' NOT NULL,
              is_anonymous boolean DEFAULT FALSE NOT NULL,
              totp_secret text,
              active_mfa_type text,
              ticket text,
              ticket_expires_at timestamp with time zone DEFAULT now() NOT NULL
            );
            CREATE TABLE auth.providers (id text NOT NULL PRIMARY KEY);
            CREATE TABLE auth.roles (role text NOT NULL PRIMARY KEY);
            ALTER TABLE auth.user_providers
              ADD CONSTRAINT fk_user FOREIGN KEY (user_id) REFERENCES auth.users (id) ON UPDATE CASCADE ON DELETE CASCADE;
            ALTER TABLE auth.user_providers
              ADD CONSTRAINT fk_provider FOREIGN KEY (provider_id) REFERENCES auth.providers (id) ON UPDATE CASCADE ON DELETE RESTRICT;
            ALTER TABLE auth.users
              ADD CONSTRAINT fk_default_role FOREIGN KEY (default_role) REFERENCES auth.roles (ROLE) ON UPDATE CASCADE ON DELETE RESTRICT;
            CREATE TRIGGER set_auth_user_providers_updated_at BEFORE UPDATE ON auth.user_providers
              FOR EACH ROW EXECUTE FUNCTION auth.set_current_timestamp_updated_at ();
            CREATE TRIGGER set_auth_users_updated_at BEFORE UPDATE ON auth.users
              FOR EACH ROW EXECUTE FUNCTION auth.set_current_timestamp_updated_at ();
            ALTER TABLE auth.users ADD CONSTRAINT active_mfa_types_check CHECK (active_mfa_type = 'totp' OR active_mfa_type = 'sms');
            INSERT INTO auth.roles (ROLE) VALUES ('user'), ('anonymous'), ('me');
            INSERT INTO auth.providers (id) VALUES ('github'), ('facebook'), ('twitter'), ('google'), ('apple'), ('linkedin'),
              ('windowslive'), ('spotify'), ('strava'), ('gitlab'), ('bitbucket');
            INSERT INTO auth.providers (id) VALUES ('discord'), ('twitch'), ('workos'), ('azuread'), ('entraid');
            ALTER TABLE auth.users ADD COLUMN metadata JSONB;
            ALTER TABLE auth.users ADD COLUMN webauthn_current_challenge text;
            ALTER TABLE ONLY auth.user_providers DROP CONSTRAINT IF EXISTS user_providers_user_id_provider_id_key;

            """,
        addApple: { i, sub, email in nhostUser(name: "apple\(i)", provider: "apple", sub: sub, email: email) },
        addOther: { i, uid, email in nhostUser(name: "other\(i)", provider: i % 2 == 0 && i < 100 ? "google" : "github", sub: uid, email: email) },
        appleRow: { i in
            """
            SELECT p.provider_user_id || '|' || u.email || '|{}'
            FROM auth.user_providers p JOIN auth.users u ON u.id = p.user_id WHERE u.display_name = 'apple\(i)'
            """
        },
        setEmail: { i, email in "UPDATE auth.users SET email = '\(email)' WHERE display_name = 'apple\(i)'" },
        // The triggers stamp `updated_at` on the Apple rows and their users: hasura-auth's own behaviour on any update.
        invariant: """
            SELECT md5(string_agg(x, '|' ORDER BY x)) FROM (
                SELECT p::text AS x FROM auth.user_providers p WHERE p.provider_id <> 'apple'
                UNION ALL SELECT (to_jsonb(p) - 'provider_user_id' - 'updated_at')::text FROM auth.user_providers p WHERE p.provider_id = 'apple'
                UNION ALL SELECT u::text FROM auth.users u WHERE u.display_name NOT LIKE 'apple%'
                UNION ALL SELECT (to_jsonb(u) - 'email' - 'updated_at')::text FROM auth.users u WHERE u.display_name LIKE 'apple%'
                UNION ALL SELECT string_agg(id, ',' ORDER BY id) FROM auth.providers
                UNION ALL SELECT string_agg(role, ',' ORDER BY role) FROM auth.roles
            ) AS rows
            """
    ) }

    /// A hasura-auth user signed up with `provider`, as its `InsertUserWithUserProvider` leaves it.
    private static func nhostUser(name: String, provider: String, sub: String, email: String) -> String {
        """
        WITH u AS (INSERT INTO auth.users (display_name, locale, email, email_verified, default_role, metadata)
                   VALUES ('\(name)', 'en', '\(email)', true, 'user', '{"plan":"free"}') RETURNING id)
        INSERT INTO auth.user_providers (user_id, access_token, refresh_token, provider_id, provider_user_id)
        SELECT id, 'access-\(name)', 'refresh-\(name)', '\(provider)', '\(sub)' FROM u
        """
    }
}

@Suite("Nhost hasura-auth tables, through the built binary")
struct SchemaNhostTests {
    @Test("sign-ins, concurrent first sign-ins, email conflicts, unmatched, exchange, report; other rows untouched")
    func scenario() async throws {
        try await SchemaScenario.run(.nhost)
    }

    /// hasura-auth's `GetUserByProviderID` (go/sql/query.sql), as it runs it.
    @Test("hasura-auth's own lookup finds each Apple user under the new subject as the same user")
    func lookup() async throws {
        func query(_ provider: String) -> @Sendable (String) -> String {
            { sub in
                """
                WITH user_providers AS (SELECT * FROM auth.user_providers WHERE provider_user_id = '\(sub)' AND provider_id = '\(provider)' LIMIT 1)
                SELECT id FROM auth.users WHERE id = (SELECT user_id FROM user_providers) LIMIT 1
                """
            }
        }
        try await ServerLookup(apple: query("apple"), other: query("google")).run(.nhost)
    }

    @Test("exchange records the pair, report lists it, merge moves the identifier; other rows untouched")
    func merge() async throws {
        try await MergeScenario.run(.nhost)
    }
}
