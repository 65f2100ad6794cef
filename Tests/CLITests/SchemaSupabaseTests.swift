import Foundation
import TestSupport
import Testing

/// Supabase Auth: `auth.identities (provider_id, provider, user_id uuid, identity_data jsonb)` with a generated
/// `email` column computed from `identity_data`, unique on `(provider_id, provider)`, uuid keys; the email in
/// `auth.users` under a partial unique index, whose `raw_user_meta_data` copies the claims again.
extension Framework {
    static var supabase: Framework { Framework(
        name: "supabase",
        ddl: """
            CREATE SCHEMA auth;
            CREATE TABLE auth.users (instance_id uuid NULL, id uuid NOT NULL, aud varchar(255) NULL, "role" varchar(255) NULL,
                email varchar(255) NULL, encrypted_password varchar(255) NULL, email_confirmed_at timestamptz NULL,
                raw_app_meta_data jsonb NULL, raw_user_meta_data jsonb NULL, created_at timestamptz NULL, updated_at timestamptz NULL,
                is_sso_user boolean NOT NULL DEFAULT false, CONSTRAINT users_pkey PRIMARY KEY (id));
            CREATE UNIQUE INDEX users_email_partial_key ON auth.users USING btree (email) WHERE (is_sso_user = false);
            CREATE TABLE auth.identities (provider_id text NOT NULL, user_id uuid NOT NULL, identity_data jsonb NOT NULL,
                provider text NOT NULL, last_sign_in_at timestamptz NULL, created_at timestamptz NULL, updated_at timestamptz NULL,
                email text GENERATED ALWAYS AS (lower((identity_data ->> 'email'::text))) STORED,
                id uuid NOT NULL DEFAULT gen_random_uuid(),
                CONSTRAINT identities_pkey PRIMARY KEY (id),
                CONSTRAINT identities_provider_id_provider_unique UNIQUE (provider_id, provider),
                CONSTRAINT identities_user_id_fkey FOREIGN KEY (user_id) REFERENCES auth.users(id) ON DELETE CASCADE);
            CREATE INDEX identities_user_id_idx ON auth.identities USING btree (user_id);

            """,
        addApple: { i, sub, email in
            """
            WITH u AS (INSERT INTO auth.users (id, aud, "role", email, raw_app_meta_data, raw_user_meta_data, created_at)
                       VALUES (gen_random_uuid(), 'authenticated', 'authenticated', '\(email)', '{"provider":"apple","providers":["apple"]}',
                               jsonb_build_object('test_user', 'apple\(i)', 'iss', 'https://appleid.apple.com', 'sub', '\(sub)', 'provider_id', '\(sub)',
                                                  'email', '\(email)', 'email_verified', true, 'custom_claims', jsonb_build_object('is_private_email', true)),
                               '2024-01-01T00:00:00Z') RETURNING id)
            INSERT INTO auth.identities (provider_id, user_id, identity_data, provider, created_at)
            SELECT '\(sub)', id, jsonb_build_object('iss', 'https://appleid.apple.com', 'sub', '\(sub)', 'email', '\(email)',
                                                    'provider_id', '\(sub)', 'email_verified', true, 'phone_verified', false),
                   'apple', '2024-01-01T00:00:00Z' FROM u
            """
        },
        addOther: { i, uid, email in
            """
            WITH u AS (INSERT INTO auth.users (id, aud, "role", email, raw_user_meta_data, created_at)
                       VALUES (gen_random_uuid(), 'authenticated', 'authenticated', '\(email)', '{"test_user":"google\(i)"}', '2024-01-01T00:00:00Z') RETURNING id)
            INSERT INTO auth.identities (provider_id, user_id, identity_data, provider, created_at)
            SELECT '\(uid)', id, jsonb_build_object('iss', 'https://accounts.google.com', 'sub', '\(uid)', 'email', '\(email)', 'provider_id', '\(uid)'),
                   'google', '2024-01-01T00:00:00Z' FROM u
            """
        },
        appleRow: { i in
            """
            SELECT i.provider_id || '|' || u.email || '|' || i.identity_data::text
            FROM auth.identities i JOIN auth.users u ON u.id = i.user_id WHERE u.raw_user_meta_data->>'test_user' = 'apple\(i)'
            """
        },
        setEmail: { i, email in "UPDATE auth.users SET email = '\(email)' WHERE raw_user_meta_data->>'test_user' = 'apple\(i)'" },
        invariant: """
            SELECT md5(string_agg(x, '|' ORDER BY x)) FROM (
                SELECT i::text AS x FROM auth.identities i WHERE i.provider <> 'apple'
                UNION ALL SELECT u::text FROM auth.users u WHERE u.raw_user_meta_data->>'test_user' NOT LIKE 'apple%'
                UNION ALL SELECT concat_ws(',', i.id, i.provider, i.user_id, i.last_sign_in_at, i.created_at, i.updated_at,
                                           (i.identity_data - 'sub' - 'provider_id' - 'email')::text)
                          FROM auth.identities i WHERE i.provider = 'apple'
                UNION ALL SELECT (to_jsonb(u) - 'email' - 'raw_user_meta_data')::text || (u.raw_user_meta_data - 'sub' - 'provider_id' - 'email')::text
                          FROM auth.users u WHERE u.raw_user_meta_data->>'test_user' LIKE 'apple%'
            ) AS rows
            """,
        emailCopy: { i in "SELECT raw_user_meta_data->>'email' FROM auth.users WHERE raw_user_meta_data->>'test_user' = 'apple\(i)'" },
        jsonSubjectKeys: ["sub", "provider_id"]
    ) }
}

@Suite("Supabase Auth tables, through the built binary")
struct SchemaSupabaseTests {
    @Test("sign-ins, concurrent first sign-ins, email conflicts, unmatched, exchange, report; other rows untouched")
    func scenario() async throws {
        try await SchemaScenario.run(.supabase)
    }

    @Test("a generated column named as the email column is refused at start-up with a fix")
    func generatedColumn() async throws {
        try await SchemaWorld.run(.supabase, apple: 1) { world in
            let config = try world.configuration { legacy in
                legacy["email"] = nil
                legacy["email_column"] = "email"
                var json = legacy["json"] as? [String: Any]
                json?["email_table_column"] = nil  // the users table's copy needs legacy.email
                legacy["json"] = json
            }
            let result = try await runBatonOffPool(["serve", "--config", config])
            #expect(result.status == 1)
            #expect(result.stderr.contains("auth.identities.email is a generated column"), "\(result.stderr)")
        }
    }
}
