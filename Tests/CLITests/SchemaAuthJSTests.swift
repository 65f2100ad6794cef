import Foundation
import TestSupport
import Testing

/// Auth.js / NextAuth with the Prisma adapter: `"Account" ("provider", "providerAccountId", "userId")`, unique on
/// `(provider, providerAccountId)`, text (cuid) keys and camelCase columns; the email in `"User"`, unique.
extension Framework {
    static var authjs: Framework { Framework(
        name: "authjs",
        ddl: """
            CREATE TABLE "User" ("id" TEXT NOT NULL, "name" TEXT, "email" TEXT, "emailVerified" TIMESTAMP(3), "image" TEXT,
                CONSTRAINT "User_pkey" PRIMARY KEY ("id"));
            CREATE UNIQUE INDEX "User_email_key" ON "User"("email");
            CREATE TABLE "Account" ("id" TEXT NOT NULL, "userId" TEXT NOT NULL, "type" TEXT NOT NULL, "provider" TEXT NOT NULL,
                "providerAccountId" TEXT NOT NULL, "refresh_token" TEXT, "access_token" TEXT, "expires_at" INTEGER, "token_type" TEXT,
                "scope" TEXT, "id_token" TEXT, "session_state" TEXT, CONSTRAINT "Account_pkey" PRIMARY KEY ("id"));
            CREATE UNIQUE INDEX "Account_provider_providerAccountId_key" ON "Account"("provider", "providerAccountId");
            ALTER TABLE "Account" ADD CONSTRAINT "Account_userId_fkey" FOREIGN KEY ("userId") REFERENCES "User"("id") ON DELETE CASCADE ON UPDATE CASCADE;

            """,
        addApple: { i, sub, email in
            """
            INSERT INTO "User" ("id", "name", "email") VALUES ('cluser\(i)apple', 'Apple \(i)', '\(email)');
            INSERT INTO "Account" ("id", "userId", "type", "provider", "providerAccountId", "id_token", "scope")
            VALUES ('claccount\(i)apple', 'cluser\(i)apple', 'oidc', 'apple', '\(sub)', 'eyJ.old.token', 'name email')
            """
        },
        addOther: { i, uid, email in
            """
            INSERT INTO "User" ("id", "name", "email") VALUES ('cluser\(i)google', 'Google \(i)', '\(email)');
            INSERT INTO "Account" ("id", "userId", "type", "provider", "providerAccountId", "access_token")
            VALUES ('claccount\(i)google', 'cluser\(i)google', 'oauth', 'google', '\(uid)', 'ya29.token')
            """
        },
        appleRow: { i in
            """
            SELECT a."providerAccountId" || '|' || u."email" || '|{}' FROM "Account" a JOIN "User" u ON u."id" = a."userId"
            WHERE u."id" = 'cluser\(i)apple'
            """
        },
        setEmail: { i, email in "UPDATE \"User\" SET \"email\" = '\(email)' WHERE \"id\" = 'cluser\(i)apple'" },
        invariant: """
            SELECT md5(string_agg(x, '|' ORDER BY x)) FROM (
                SELECT a::text AS x FROM "Account" a WHERE a."provider" <> 'apple'
                UNION ALL SELECT u::text FROM "User" u WHERE u."id" NOT LIKE '%apple'
                UNION ALL SELECT (to_jsonb(a) - 'providerAccountId')::text FROM "Account" a WHERE a."provider" = 'apple'
                UNION ALL SELECT (to_jsonb(u) - 'email')::text FROM "User" u WHERE u."id" LIKE '%apple'
            ) AS rows
            """
    ) }
}

@Suite("Auth.js (Prisma adapter) tables, through the built binary")
struct SchemaAuthJSTests {
    @Test("sign-ins, concurrent first sign-ins, email conflicts, unmatched, exchange, report; other rows untouched")
    func scenario() async throws {
        try await SchemaScenario.run(.authjs)
    }
}
