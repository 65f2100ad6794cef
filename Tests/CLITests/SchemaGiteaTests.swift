import Foundation
import TestSupport
import Testing

/// Gitea (and Forgejo, which keeps these models): `external_login_user (external_id, user_id, login_source_id,
/// raw_data, provider, email, …)` with the primary key `(external_id, login_source_id)` and `user_id` indexed, not
/// unique; `user.email`, and again `email_address (uid, email, lower_email, is_activated, is_primary)` with both
/// addresses unique. Gitea creates its tables by xorm's sync of its models on a fresh install (the migrations only
/// bring old databases there), so these are the statements xorm's PostgreSQL dialect issues for go-gitea/gitea's
/// models/user/external_login_user.go (commit 0327ff2b), models/user/email_address.go (00359c76) and
/// models/user/user.go (003714bd): `VARCHAR(255)` strings, `BIGSERIAL` keys, `IDX_`/`UQE_` index names, no foreign
/// keys. `login_source` is reduced to the columns the rows need. Then the unique index docs/schemas.md tells the
/// operator to run (without `CONCURRENTLY`, which the test's single transaction refuses). Apple users registered
/// themselves through the Apple source (`login_type` 6, `login_name` the `sub`); a second Apple source (another app)
/// holds links with the Apple users' old identifiers; GitHub links their new ones.
extension Framework {
    static let giteaAppleSource = 1
    static let giteaOtherAppleSource = 2
    static let giteaGitHubSource = 3

    static var gitea: Framework { Framework(
        name: "gitea",
        ddl: """
            CREATE TABLE IF NOT EXISTS "login_source" ("id" BIGSERIAL PRIMARY KEY  NOT NULL, "type" INTEGER NULL, "name" VARCHAR(255) NULL,
                "is_active" BOOL DEFAULT false NOT NULL, "cfg" TEXT NULL);
            CREATE UNIQUE INDEX "UQE_login_source_name" ON "login_source" ("name");
            CREATE TABLE IF NOT EXISTS "user" ("id" BIGSERIAL PRIMARY KEY  NOT NULL, "lower_name" VARCHAR(255) NOT NULL, "name" VARCHAR(255) NOT NULL,
                "full_name" VARCHAR(255) NULL, "email" VARCHAR(255) NOT NULL, "keep_email_private" BOOL NULL,
                "email_notifications_preference" VARCHAR(20) DEFAULT 'enabled' NOT NULL, "passwd" VARCHAR(255) NOT NULL,
                "passwd_hash_algo" VARCHAR(255) DEFAULT 'argon2' NOT NULL, "must_change_password" BOOL DEFAULT false NOT NULL,
                "login_type" INTEGER NULL, "login_source" BIGINT DEFAULT 0 NOT NULL, "login_name" VARCHAR(255) NULL, "type" INTEGER NULL,
                "location" VARCHAR(255) NULL, "website" VARCHAR(255) NULL, "rands" VARCHAR(10) NULL, "salt" VARCHAR(10) NULL,
                "language" VARCHAR(5) NULL, "description" VARCHAR(255) NULL, "created_unix" BIGINT NULL, "updated_unix" BIGINT NULL,
                "last_login_unix" BIGINT NULL, "last_repo_visibility" BOOL NULL, "max_repo_creation" INTEGER DEFAULT -1 NOT NULL,
                "is_active" BOOL NULL, "is_admin" BOOL NULL, "is_restricted" BOOL DEFAULT false NOT NULL, "allow_git_hook" BOOL NULL,
                "allow_import_local" BOOL NULL, "allow_create_organization" BOOL DEFAULT true NULL, "prohibit_login" BOOL DEFAULT false NOT NULL,
                "avatar" VARCHAR(2048) NOT NULL, "avatar_email" VARCHAR(255) NOT NULL, "use_custom_avatar" BOOL NULL,
                "num_followers" INTEGER NULL, "num_following" INTEGER DEFAULT 0 NOT NULL, "num_stars" INTEGER NULL, "num_repos" INTEGER NULL,
                "num_teams" INTEGER NULL, "num_members" INTEGER NULL, "visibility" INTEGER DEFAULT 0 NOT NULL,
                "repo_admin_change_team_access" BOOL DEFAULT false NOT NULL, "diff_view_style" VARCHAR(255) DEFAULT '' NOT NULL,
                "theme" VARCHAR(255) DEFAULT '' NOT NULL, "keep_activity_private" BOOL DEFAULT false NOT NULL);
            CREATE UNIQUE INDEX "UQE_user_lower_name" ON "user" ("lower_name");
            CREATE UNIQUE INDEX "UQE_user_name" ON "user" ("name");
            CREATE INDEX "IDX_user_created_unix" ON "user" ("created_unix");
            CREATE INDEX "IDX_user_updated_unix" ON "user" ("updated_unix");
            CREATE INDEX "IDX_user_last_login_unix" ON "user" ("last_login_unix");
            CREATE INDEX "IDX_user_is_active" ON "user" ("is_active");
            CREATE TABLE IF NOT EXISTS "email_address" ("id" BIGSERIAL PRIMARY KEY  NOT NULL, "uid" BIGINT NOT NULL, "email" VARCHAR(255) NOT NULL,
                "lower_email" VARCHAR(255) NOT NULL, "is_activated" BOOL NULL, "is_primary" BOOL DEFAULT false NOT NULL);
            CREATE INDEX "IDX_email_address_uid" ON "email_address" ("uid");
            CREATE UNIQUE INDEX "UQE_email_address_email" ON "email_address" ("email");
            CREATE UNIQUE INDEX "UQE_email_address_lower_email" ON "email_address" ("lower_email");
            CREATE TABLE IF NOT EXISTS "external_login_user" ("external_id" VARCHAR(255) NOT NULL, "user_id" BIGINT NOT NULL,
                "login_source_id" BIGINT NOT NULL, "raw_data" TEXT NULL, "provider" VARCHAR(25) NULL, "email" VARCHAR(255) NULL,
                "name" VARCHAR(255) NULL, "first_name" VARCHAR(255) NULL, "last_name" VARCHAR(255) NULL, "nick_name" VARCHAR(255) NULL,
                "description" VARCHAR(255) NULL, "avatar_url" TEXT NULL, "location" VARCHAR(255) NULL, "access_token" TEXT NULL,
                "access_token_secret" TEXT NULL, "refresh_token" TEXT NULL, "expires_at" TIMESTAMP NULL,
                PRIMARY KEY ( "external_id","login_source_id" ));
            CREATE INDEX "IDX_external_login_user_user_id" ON "external_login_user" ("user_id");
            CREATE INDEX "IDX_external_login_user_provider" ON "external_login_user" ("provider");
            INSERT INTO "login_source" ("type", "name", "is_active", "cfg") VALUES
                (6, 'Apple', true, '{"Provider":"apple","ClientID":"com.example.app"}'),
                (6, 'Apple (web app)', true, '{"Provider":"apple","ClientID":"com.example.web"}'),
                (6, 'GitHub', true, '{"Provider":"github","ClientID":"Iv1.0000"}');
            \(giteaKeyIndex);

            """,
        addApple: { i, sub, email in giteaUser(name: "apple\(i)", source: giteaAppleSource, provider: "apple", sub: sub, email: email) },
        // Even users: links of the other Apple source (the old identifiers); odd ones and the rest: GitHub links.
        addOther: { i, uid, email in
            i % 2 == 0 && i < 100
                ? giteaUser(name: "apple-web\(i)", source: giteaOtherAppleSource, provider: "apple", sub: uid, email: email)
                : giteaUser(name: "github\(i)", source: giteaGitHubSource, provider: "github", sub: uid, email: email)
        },
        appleRow: { i in
            """
            SELECT x.external_id || '|' || u.email || '|{}' FROM external_login_user x JOIN "user" u ON u.id = x.user_id
            WHERE u.name = 'apple\(i)' AND x.login_source_id = \(giteaAppleSource)
            """
        },
        setEmail: { i, email in
            """
            UPDATE email_address SET email = '\(email)', lower_email = lower('\(email)') FROM "user" u WHERE u.id = email_address.uid AND u.name = 'apple\(i)';
            UPDATE "user" SET email = '\(email)' WHERE name = 'apple\(i)'
            """
        },
        // Of the Apple links only `external_id` may change, of their users only `email`, of their addresses only `email` and `lower_email`.
        invariant: """
            SELECT md5(string_agg(x, '|' ORDER BY x)) FROM (
                SELECT x::text AS x FROM external_login_user x WHERE x.login_source_id <> \(giteaAppleSource)
                UNION ALL SELECT (to_jsonb(x) - 'external_id')::text FROM external_login_user x WHERE x.login_source_id = \(giteaAppleSource)
                UNION ALL SELECT u::text FROM "user" u WHERE u.name !~ '^apple[0-9]+$'
                UNION ALL SELECT (to_jsonb(u) - 'email')::text FROM "user" u WHERE u.name ~ '^apple[0-9]+$'
                UNION ALL SELECT e::text FROM email_address e WHERE e.uid NOT IN (SELECT id FROM "user" WHERE name ~ '^apple[0-9]+$')
                UNION ALL SELECT (to_jsonb(e) - 'email' - 'lower_email')::text FROM email_address e WHERE e.uid IN (SELECT id FROM "user" WHERE name ~ '^apple[0-9]+$')
                UNION ALL SELECT s::text FROM login_source s
            ) AS rows
            """
    ) }

    /// docs/schemas.md's unique index making `user_id` a key among one source's links (Gitea holds it so by its code only).
    static let giteaKeyIndex = #"CREATE UNIQUE INDEX ON "public"."external_login_user" ("login_source_id", "user_id")"#

    /// docs/schemas.md's statement for what Baton cannot follow: `user.login_name` (Gitea's first lookup), brought in
    /// step after the exchange.
    static let giteaLoginNameFix = """
        UPDATE "user" u SET login_name = x.external_id FROM external_login_user x
        WHERE x.user_id = u.id AND x.login_source_id = \(giteaAppleSource) AND u.login_type = 6 AND u.login_source = \(giteaAppleSource)
          AND u.login_name <> x.external_id
        """

    /// A Gitea user registered automatically through an OAuth2 source (`login_type` 6, `login_name` the provider's user
    /// ID), with its primary address and its link, as `oAuth2UserLoginCallback` and `createUserInContext` leave them.
    private static func giteaUser(name: String, source: Int, provider: String, sub: String, email: String) -> String {
        """
        WITH u AS (INSERT INTO "user" (lower_name, name, full_name, email, keep_email_private, passwd, passwd_hash_algo, login_type, login_source,
                       login_name, type, rands, salt, created_unix, updated_unix, last_login_unix, is_active, is_admin, avatar, avatar_email,
                       use_custom_avatar, num_followers, num_stars, num_repos)
                   VALUES ('\(name)', '\(name)', '', '\(email)', false, '', '', 6, \(source), '\(sub)', 0, '', '',
                           1746057600, 1746057600, 1746057600, true, false, '', '\(email)', false, 0, 0, 0) RETURNING id),
             e AS (INSERT INTO email_address (uid, email, lower_email, is_activated, is_primary) SELECT id, '\(email)', lower('\(email)'), true, true FROM u)
        INSERT INTO external_login_user (external_id, user_id, login_source_id, raw_data, provider, email, name, first_name, last_name, nick_name,
                                         description, avatar_url, location, access_token, access_token_secret, refresh_token, expires_at)
        SELECT '\(sub)', id, \(source), '{"sub":"\(sub)","email":"\(email)"}', '\(provider)', '\(email)', '', '', '', '', '', '', '',
               'token-\(name)', '', '', '2025-05-01 01:00:00' FROM u
        """
    }
}

@Suite("Gitea tables with several login sources, through the built binary")
struct SchemaGiteaTests {
    /// Gitea's `oAuth2UserLoginCallback` (routers/web/auth/oauth.go): first `user` by `login_name`, `login_type` and
    /// `login_source`, then `external_login_user` by `external_id` and `login_source_id` (its primary key) through
    /// `GetExternalLogin`, then the link's `user_id`. The second is the one Baton's rewrite serves; the first keeps the
    /// old `sub` until docs/schemas.md's statement runs. `lower_email` follows the address (`derived`).
    @Test("Gitea's own lookup finds each Apple user under the new subject as the same user, in its source only; lower_email follows; login_name and the statement that brings it in step")
    func lookup() async throws {
        func link(_ source: Int) -> @Sendable (String) -> String {
            { "SELECT user_id FROM external_login_user WHERE external_id = '\($0)' AND login_source_id = \(source) LIMIT 1" }
        }
        let byLoginName: @Sendable (String) -> String = {
            "SELECT id FROM \"user\" WHERE login_name = '\($0)' AND login_type = 6 AND login_source = \(Framework.giteaAppleSource) LIMIT 1"
        }
        try await ServerLookup(apple: link(Framework.giteaAppleSource), other: link(Framework.giteaOtherAppleSource)) { world in
            for person in world.people {
                let email = try world.claims(try world.token(person.id))["email"]!.stringValue!
                let user = try world.psql(link(Framework.giteaAppleSource)(person.newSub))
                #expect(try world.psql("SELECT email FROM \"user\" WHERE id = \(user)") == email)
                #expect(email != person.email)
                #expect(try world.psql("SELECT email || ' ' || lower_email FROM email_address WHERE uid = \(user)") == "\(email) \(email.lowercased())")
                // What Baton cannot write: the first lookup's `login_name` keeps the old value.
                #expect(try world.psql(byLoginName(person.oldSub)) == user)
                #expect(try world.psql(byLoginName(person.newSub)) == "")
            }
            _ = try world.psql(Framework.giteaLoginNameFix)
            for person in world.people {
                let user = try world.psql(link(Framework.giteaAppleSource)(person.newSub))
                #expect(try world.psql(byLoginName(person.newSub)) == user)
                #expect(try world.psql(byLoginName(person.oldSub)) == "")
            }
            // The other Apple source's users kept their login names and addresses.
            #expect(try world.count("""
                SELECT count(*) FROM "user" u JOIN external_login_user x ON x.user_id = u.id
                WHERE x.login_source_id = \(Framework.giteaOtherAppleSource) AND u.login_name <> x.external_id
                """) == 0)
        }.run(.gitea)
    }

    @Test("exchange records the pair, report lists it, merge moves the identifier; other rows and sources untouched")
    func merge() async throws {
        try await MergeScenario.run(.gitea)
    }

    /// Without the index docs/schemas.md gives, `baton doctor` fails on the key's uniqueness (the subject's is the
    /// primary key, over no single column), and its fix is that index: the link source's column leading, then `user_id`.
    @Test("doctor fails on the key's uniqueness, printing the unique index docs/schemas.md gives, until it exists")
    func index() async throws {
        try await MissingIndex(statement: Framework.giteaKeyIndex, failure: "FAIL  key uniqueness").run(.gitea)
    }
}
