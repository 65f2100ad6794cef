import Foundation
import TestSupport
import Testing

/// Rails with OmniAuth: an `identities (provider, uid, user_id)` table as a Rails migration creates it (bigint
/// keys, `character varying`, `index_identities_on_provider_and_uid` unique); the email in `users`, unique.
extension Framework {
    static var omniauth: Framework { Framework(
        name: "omniauth",
        ddl: """
            CREATE TABLE "users" ("id" bigserial primary key, "email" character varying DEFAULT '' NOT NULL,
                "encrypted_password" character varying DEFAULT '' NOT NULL, "created_at" timestamp(6) NOT NULL, "updated_at" timestamp(6) NOT NULL);
            CREATE UNIQUE INDEX "index_users_on_email" ON "users" ("email");
            CREATE TABLE "identities" ("id" bigserial primary key, "provider" character varying NOT NULL, "uid" character varying NOT NULL,
                "user_id" bigint NOT NULL, "created_at" timestamp(6) NOT NULL, "updated_at" timestamp(6) NOT NULL,
                CONSTRAINT "fk_rails_5373344100" FOREIGN KEY ("user_id") REFERENCES "users" ("id"));
            CREATE INDEX "index_identities_on_user_id" ON "identities" ("user_id");
            CREATE UNIQUE INDEX "index_identities_on_provider_and_uid" ON "identities" ("provider", "uid");

            """,
        addApple: { i, sub, email in
            """
            WITH u AS (INSERT INTO users (email, created_at, updated_at) VALUES ('\(email)', '2024-01-01', '2024-01-01') RETURNING id)
            INSERT INTO identities (provider, uid, user_id, created_at, updated_at) SELECT 'apple', '\(sub)', id, '2024-01-0\(i % 9 + 1)', '2024-02-01' FROM u
            """
        },
        addOther: { i, uid, email in
            """
            WITH u AS (INSERT INTO users (email, created_at, updated_at) VALUES ('\(email)', '2023-01-01', '2023-01-01') RETURNING id)
            INSERT INTO identities (provider, uid, user_id, created_at, updated_at) SELECT 'google_oauth2', '\(uid)', id, '2023-01-01', '2023-02-01' FROM u
            """
        },
        appleRow: { i in
            """
            SELECT i.uid || '|' || u.email || '|{}' FROM identities i JOIN users u ON u.id = i.user_id
            WHERE i.provider = 'apple' ORDER BY i.id OFFSET \(i) LIMIT 1
            """
        },
        setEmail: { i, email in
            "UPDATE users SET email = '\(email)' WHERE id = (SELECT user_id FROM identities WHERE provider = 'apple' ORDER BY id OFFSET \(i) LIMIT 1)"
        },
        invariant: """
            SELECT md5(string_agg(x, '|' ORDER BY x)) FROM (
                SELECT i::text AS x FROM identities i WHERE i.provider <> 'apple'
                UNION ALL SELECT u::text FROM users u WHERE NOT EXISTS (SELECT 1 FROM identities i WHERE i.user_id = u.id AND i.provider = 'apple')
                UNION ALL SELECT (to_jsonb(i) - 'uid')::text FROM identities i WHERE i.provider = 'apple'
                UNION ALL SELECT (to_jsonb(u) - 'email')::text FROM users u WHERE EXISTS (SELECT 1 FROM identities i WHERE i.user_id = u.id AND i.provider = 'apple')
            ) AS rows
            """
    ) }
}

@Suite("Rails OmniAuth identities, through the built binary")
struct SchemaOmniAuthTests {
    @Test("sign-ins, concurrent first sign-ins, email conflicts, unmatched, exchange, report; other rows untouched")
    func scenario() async throws {
        try await SchemaScenario.run(.omniauth)
    }
}
