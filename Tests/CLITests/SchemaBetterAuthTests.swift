import Foundation
import TestSupport
import Testing

/// better-auth: `"account" ("providerId", "accountId", "userId")` with text keys and no unique constraint over
/// `(providerId, accountId)` (Baton refuses to start and gives the index to add); the email in `"user"`
/// (a reserved word), unique.
extension Framework {
    static var betterAuth: Framework { Framework(
        name: "better-auth",
        ddl: """
            create table "user" ("id" text not null primary key, "name" text not null, "email" text not null unique,
                "emailVerified" boolean not null, "image" text, "createdAt" timestamp not null, "updatedAt" timestamp not null);
            create table "account" ("id" text not null primary key, "accountId" text not null, "providerId" text not null,
                "userId" text not null references "user" ("id") on delete cascade, "accessToken" text, "refreshToken" text,
                "idToken" text, "accessTokenExpiresAt" timestamp, "refreshTokenExpiresAt" timestamp, "scope" text,
                "password" text, "createdAt" timestamp not null, "updatedAt" timestamp not null);

            """,
        addApple: { i, sub, email in
            """
            insert into "user" values ('user-apple-\(i)', 'Apple \(i)', '\(email)', true, null, '2024-01-01', '2024-01-01');
            insert into "account" ("id", "accountId", "providerId", "userId", "idToken", "createdAt", "updatedAt")
            values ('acc-apple-\(i)', '\(sub)', 'apple', 'user-apple-\(i)', 'eyJ.old', '2024-01-01', '2024-01-02')
            """
        },
        addOther: { i, uid, email in
            """
            insert into "user" values ('user-other-\(i)', 'Other \(i)', '\(email)', false, null, '2024-01-01', '2024-01-01');
            insert into "account" ("id", "accountId", "providerId", "userId", "accessToken", "createdAt", "updatedAt")
            values ('acc-other-\(i)', '\(uid)', 'github', 'user-other-\(i)', 'gho_x', '2024-01-01', '2024-01-02')
            """
        },
        appleRow: { i in
            """
            select a."accountId" || '|' || u."email" || '|{}' from "account" a join "user" u on u."id" = a."userId"
            where u."id" = 'user-apple-\(i)'
            """
        },
        setEmail: { i, email in "update \"user\" set \"email\" = '\(email)' where \"id\" = 'user-apple-\(i)'" },
        invariant: """
            select md5(string_agg(x, '|' order by x)) from (
                select a::text as x from "account" a where a."providerId" <> 'apple'
                union all select u::text from "user" u where u."id" like 'user-other-%'
                union all select (to_jsonb(a) - 'accountId')::text from "account" a where a."providerId" = 'apple'
                union all select (to_jsonb(u) - 'email')::text from "user" u where u."id" like 'user-apple-%'
            ) as rows
            """,
        hasSubjectIndex: false
    ) }
}

@Suite("better-auth tables, through the built binary")
struct SchemaBetterAuthTests {
    @Test("refused without a unique index (with the SQL to add it), then the whole scenario; other rows untouched")
    func scenario() async throws {
        try await SchemaScenario.run(.betterAuth)
    }
}
