import Foundation
import TestSupport
import Testing

/// Casdoor: every user of every organization in one table, `"user"`, keyed by `(owner, name)` (the organization and
/// the user's name); one column per identity provider holds that provider's user ID (`apple` the Apple `sub`), `''` on
/// every other user's row, so no unique index can cover the column as it is; `id` (Casdoor's own user ID, the `sub` of
/// the tokens Casdoor issues) is indexed, not unique, and is the Apple `sub` for a user who signed up through Apple;
/// `properties`, a JSON map as text, keeps copies of what the provider said (`oauth_Apple_id`, `oauth_Apple_email`,
/// `oauth_Apple_username`, the tokens, and `oauth_Apple_extra`, goth's raw claims as a JSON string inside the map).
/// Casdoor creates the table by xorm's sync of its `User` model (casdoor/casdoor object/user.go at commit edfbb932,
/// `ormer.go`'s `Sync2(new(User))`), so these are the statements xorm's PostgreSQL dialect issues: snake-case
/// column names unless the tag names one, `VARCHAR(n)`, `TEXT` for `text`, `mediumtext` and slices or maps (stored as
/// JSON), `BYTEA` for `blob`, `IDX_<table>_<column>` indexes, no foreign keys, every column but the key nullable.
/// Then the partial unique index docs/schemas.md tells the operator to run (without `CONCURRENTLY`). A second
/// organization holds Apple users under the Apple users' old identifiers; GitHub users of the app's organization hold
/// their new ones in `github`, with `apple` `''`.
extension Framework {
    static let casdoorOrganization = "example-org"
    static let casdoorOtherOrganization = "other-org"

    static var casdoor: Framework { Framework(
        name: "casdoor",
        ddl: """
            CREATE TABLE IF NOT EXISTS "user" ("owner" VARCHAR(100) NOT NULL, "name" VARCHAR(255) NOT NULL, "created_time" VARCHAR(100) NULL,
            "updated_time" VARCHAR(100) NULL, "deleted_time" VARCHAR(100) NULL, "id" VARCHAR(100) NULL, "external_id" VARCHAR(100) NULL,
            "type" VARCHAR(100) NULL, "password" VARCHAR(150) NULL, "password_salt" VARCHAR(100) NULL, "password_type" VARCHAR(100) NULL,
            "display_name" VARCHAR(100) NULL, "first_name" VARCHAR(100) NULL, "last_name" VARCHAR(100) NULL, "avatar" TEXT NULL, "avatar_type"
            VARCHAR(100) NULL, "permanent_avatar" VARCHAR(500) NULL, "email" VARCHAR(100) NULL, "email_verified" BOOL NULL, "phone"
            VARCHAR(100) NULL, "country_code" VARCHAR(6) NULL, "region" VARCHAR(100) NULL, "location" VARCHAR(100) NULL, "address" TEXT NULL,
            "addresses" BYTEA NULL, "affiliation" VARCHAR(100) NULL, "title" VARCHAR(100) NULL, "id_card_type" VARCHAR(100) NULL, "id_card"
            VARCHAR(100) NULL, "real_name" VARCHAR(100) NULL, "is_verified" BOOL NULL, "homepage" VARCHAR(100) NULL, "bio" VARCHAR(100) NULL,
            "tag" VARCHAR(100) NULL, "language" VARCHAR(100) NULL, "gender" VARCHAR(100) NULL, "birthday" VARCHAR(100) NULL, "education"
            VARCHAR(100) NULL, "score" INTEGER NULL, "karma" INTEGER NULL, "ranking" INTEGER NULL, "balance" DOUBLE PRECISION NULL,
            "balance_credit" DOUBLE PRECISION NULL, "currency" VARCHAR(100) NULL, "balance_currency" VARCHAR(100) NULL, "is_default_avatar"
            BOOL NULL, "is_online" BOOL NULL, "is_admin" BOOL NULL, "is_forbidden" BOOL NULL, "is_deleted" BOOL NULL, "signup_application"
            VARCHAR(100) NULL, "hash" VARCHAR(100) NULL, "pre_hash" VARCHAR(100) NULL, "register_type" VARCHAR(100) NULL, "register_source"
            VARCHAR(100) NULL, "access_token" TEXT NULL, "original_token" TEXT NULL, "original_refresh_token" TEXT NULL, "created_ip"
            VARCHAR(100) NULL, "last_signin_time" VARCHAR(100) NULL, "last_signin_ip" VARCHAR(100) NULL, "github" VARCHAR(100) NULL, "google"
            VARCHAR(100) NULL, "qq" VARCHAR(100) NULL, "wechat" VARCHAR(100) NULL, "facebook" VARCHAR(100) NULL, "dingtalk" VARCHAR(100) NULL,
            "weibo" VARCHAR(100) NULL, "gitee" VARCHAR(100) NULL, "linkedin" VARCHAR(100) NULL, "wecom" VARCHAR(100) NULL, "lark" VARCHAR(100)
            NULL, "gitlab" VARCHAR(100) NULL, "adfs" VARCHAR(100) NULL, "baidu" VARCHAR(100) NULL, "alipay" VARCHAR(100) NULL, "casdoor"
            VARCHAR(100) NULL, "infoflow" VARCHAR(100) NULL, "apple" VARCHAR(100) NULL, "azuread" VARCHAR(100) NULL, "azureadb2c" VARCHAR(100)
            NULL, "slack" VARCHAR(100) NULL, "steam" VARCHAR(100) NULL, "bilibili" VARCHAR(100) NULL, "okta" VARCHAR(100) NULL, "douyin"
            VARCHAR(100) NULL, "kwai" VARCHAR(100) NULL, "line" VARCHAR(100) NULL, "amazon" VARCHAR(100) NULL, "auth0" VARCHAR(100) NULL,
            "battlenet" VARCHAR(100) NULL, "bitbucket" VARCHAR(100) NULL, "box" VARCHAR(100) NULL, "cloudfoundry" VARCHAR(100) NULL,
            "dailymotion" VARCHAR(100) NULL, "deezer" VARCHAR(100) NULL, "digitalocean" VARCHAR(100) NULL, "discord" VARCHAR(100) NULL,
            "dropbox" VARCHAR(100) NULL, "eveonline" VARCHAR(100) NULL, "fitbit" VARCHAR(100) NULL, "gitea" VARCHAR(100) NULL, "heroku"
            VARCHAR(100) NULL, "influxcloud" VARCHAR(100) NULL, "instagram" VARCHAR(100) NULL, "intercom" VARCHAR(100) NULL, "kakao"
            VARCHAR(100) NULL, "lastfm" VARCHAR(100) NULL, "mailru" VARCHAR(100) NULL, "meetup" VARCHAR(100) NULL, "microsoftonline"
            VARCHAR(100) NULL, "naver" VARCHAR(100) NULL, "nextcloud" VARCHAR(100) NULL, "onedrive" VARCHAR(100) NULL, "oura" VARCHAR(100)
            NULL, "patreon" VARCHAR(100) NULL, "paypal" VARCHAR(100) NULL, "salesforce" VARCHAR(100) NULL, "shopify" VARCHAR(100) NULL,
            "soundcloud" VARCHAR(100) NULL, "spotify" VARCHAR(100) NULL, "strava" VARCHAR(100) NULL, "stripe" VARCHAR(100) NULL, "telegram"
            VARCHAR(100) NULL, "tiktok" VARCHAR(100) NULL, "tumblr" VARCHAR(100) NULL, "twitch" VARCHAR(100) NULL, "twitter" VARCHAR(100)
            NULL, "typetalk" VARCHAR(100) NULL, "uber" VARCHAR(100) NULL, "vk" VARCHAR(100) NULL, "wepay" VARCHAR(100) NULL, "xero"
            VARCHAR(100) NULL, "yahoo" VARCHAR(100) NULL, "yammer" VARCHAR(100) NULL, "yandex" VARCHAR(100) NULL, "zoom" VARCHAR(100) NULL,
            "metamask" VARCHAR(100) NULL, "web3onboard" VARCHAR(100) NULL, "custom" VARCHAR(100) NULL, "custom2" TEXT NULL, "custom3" TEXT
            NULL, "custom4" TEXT NULL, "custom5" TEXT NULL, "custom6" TEXT NULL, "custom7" TEXT NULL, "custom8" TEXT NULL, "custom9" TEXT
            NULL, "custom10" TEXT NULL, "webauthnCredentials" BYTEA NULL, "preferred_mfa_type" VARCHAR(100) NULL, "recovery_codes" TEXT NULL,
            "totp_secret" VARCHAR(100) NULL, "mfa_phone_enabled" BOOL NULL, "mfa_email_enabled" BOOL NULL, "mfa_radius_enabled" BOOL NULL,
            "mfa_radius_username" VARCHAR(100) NULL, "mfa_radius_provider" VARCHAR(100) NULL, "mfa_push_enabled" BOOL NULL,
            "mfa_push_receiver" VARCHAR(100) NULL, "mfa_push_provider" VARCHAR(100) NULL, "invitation" VARCHAR(100) NULL, "invitation_code"
            VARCHAR(100) NULL, "face_ids" TEXT NULL, "cart" TEXT NULL, "ldap" VARCHAR(100) NULL, "uid_number" INTEGER NULL, "properties" TEXT
            NULL, "roles" TEXT NULL, "permissions" TEXT NULL, "groups" TEXT NULL, "last_change_password_time" VARCHAR(100) NULL,
            "last_signin_wrong_time" VARCHAR(100) NULL, "signin_wrong_times" INTEGER NULL, "managedAccounts" BYTEA NULL, "mfaAccounts" BYTEA
            NULL, "mfa_items" VARCHAR(300) NULL, "mfa_remember_deadline" VARCHAR(100) NULL, "need_update_password" BOOL NULL, "ip_whitelist"
            VARCHAR(200) NULL, "application_scopes" TEXT NULL, PRIMARY KEY ( "owner","name" ));
            CREATE INDEX "IDX_user_created_time" ON "user" ("created_time");
            CREATE INDEX "IDX_user_id" ON "user" ("id");
            CREATE INDEX "IDX_user_external_id" ON "user" ("external_id");
            CREATE INDEX "IDX_user_email" ON "user" ("email");
            CREATE INDEX "IDX_user_phone" ON "user" ("phone");
            CREATE INDEX "IDX_user_id_card" ON "user" ("id_card");
            CREATE INDEX "IDX_user_invitation" ON "user" ("invitation");
            CREATE INDEX "IDX_user_invitation_code" ON "user" ("invitation_code");
            CREATE INDEX "IDX_user_uid_number" ON "user" ("uid_number");
            INSERT INTO "user" (owner, name, created_time, id, type, password, display_name, email, email_verified, apple, github, google,
                is_admin, properties, signup_application)
                VALUES ('built-in', 'admin', '2026-01-01T00:00:00Z', '9d3b1f6e-0000-4000-8000-000000000001', 'normal-user', '123', 'Admin',
                        'admin@example.com', false, '', '', '', true, '{}', 'app-built-in');
            \(casdoorSubjectIndex);

            """,
        addApple: { i, sub, email in
            casdoorUser(owner: casdoorOrganization, displayName: "apple\(i)", provider: "Apple", id: sub, email: email, number: i)
        },
        // Even users: Apple users of the other organization (the old identifiers); odd ones and the rest: GitHub users.
        addOther: { i, uid, email in
            i % 2 == 0 && i < 100
                ? casdoorUser(owner: casdoorOtherOrganization, displayName: "other\(i)", provider: "Apple", id: uid, email: email, number: i)
                : casdoorUser(owner: casdoorOrganization, displayName: "github\(i)", provider: "GitHub", id: uid, email: email, number: 100 + i)
        },
        appleRow: { i in
            """
            SELECT coalesce(apple, '') || '|' || email || '|' || properties FROM "user"
            WHERE owner = '\(casdoorOrganization)' AND display_name = 'apple\(i)'
            """
        },
        setEmail: { i, email in "UPDATE \"user\" SET email = '\(email)' WHERE owner = '\(casdoorOrganization)' AND display_name = 'apple\(i)'" },
        // Of the app's Apple users only `apple`, `email` and the two keys of `properties` may change.
        invariant: """
            SELECT md5(string_agg(x, '|' ORDER BY x)) FROM (
                SELECT to_jsonb(u)::text AS x FROM "user" u WHERE u.owner <> '\(casdoorOrganization)' OR u.display_name !~ '^apple[0-9]+$'
                UNION ALL SELECT (to_jsonb(u) - 'apple' - 'email' - 'properties')::text || (u.properties::jsonb - 'oauth_Apple_id' - 'oauth_Apple_email')::text
                FROM "user" u WHERE u.owner = '\(casdoorOrganization)' AND u.display_name ~ '^apple[0-9]+$'
            ) AS rows
            """
    ) }

    /// docs/schemas.md's partial unique index: the Apple `sub` is unique within an organization among the users that have one.
    static let casdoorSubjectIndex = #"CREATE UNIQUE INDEX ON "public"."user" ("owner", "apple") WHERE "apple" <> ''"#

    /// A user as Casdoor leaves it after signing up through `provider` (controllers/auth.go: `Id` the provider's user ID,
    /// `Name` and `DisplayName` from the address's local part for Apple, `properties["no"]`), then
    /// `SetUserOAuthProperties` (object/user_util.go: `oauth_<Type>_id`, `_username`, `_email`, the tokens, `_extra`
    /// with goth's raw data) and `LinkUserAccount` (the provider's column). `properties` is encoding/json's compact
    /// output of the map, keys sorted.
    private static func casdoorUser(owner: String, displayName: String, provider: String, id: String, email: String, number: Int) -> String {
        let local = String(email.prefix { $0 != "@" })
        let extra: [String: String] = ["access_token": "a-\(displayName)", "refresh_token": "r-\(displayName)", "sub": id, "email": email,
                                       "email_verified": "true", "is_private_email": "\(email.hasSuffix("privaterelay.appleid.com"))"]
        let properties: [String: String] = [
            "no": "\(number + 2)", "oauth_\(provider)_id": id, "oauth_\(provider)_username": local, "oauth_\(provider)_email": email,
            "oauth_\(provider)_accessToken": "a-\(displayName)", "oauth_\(provider)_refreshToken": "r-\(displayName)",
            "oauth_\(provider)_extra": casdoorJSON(extra),
        ]
        let apple = provider == "Apple" ? id : "", github = provider == "GitHub" ? id : ""
        return """
            INSERT INTO "user" (owner, name, created_time, updated_time, id, type, display_name, avatar, email, email_verified, address, score,
                is_admin, is_forbidden, is_deleted, signup_application, register_type, register_source, original_token, original_refresh_token,
                apple, github, google, properties, groups, last_signin_time)
            VALUES ('\(owner)', '\(local)', '2026-05-01T10:00:00Z', '2026-05-01T10:00:00Z', '\(id)', 'normal-user', '\(displayName)', '', '\(email)',
                    false, '[]', 2000, false, false, false, 'app', 'Application Signup', '\(owner)/app', 'a-\(displayName)', 'r-\(displayName)',
                    '\(apple)', '\(github)', '', '\(casdoorJSON(properties).replacingOccurrences(of: "'", with: "''"))', '[]', '2026-10-01T12:00:00Z')
            """
    }

    /// `map[string]string` as encoding/json writes it: compact, keys sorted.
    private static func casdoorJSON(_ map: [String: String]) -> String {
        String(decoding: try! JSONSerialization.data(withJSONObject: map, options: [.sortedKeys, .withoutEscapingSlashes]), as: UTF8.self)
    }
}

@Suite("Casdoor users of several organizations and providers, through the built binary")
struct SchemaCasdoorTests {
    /// Casdoor's `GetUserByField(organization, "Apple", sub)` (object/user_util.go, called by `getUserByProvider` in
    /// controllers/auth.go), as xorm runs it: the lower-cased provider type as the column, the organization from the bean.
    static func getUserByField(_ organization: String) -> @Sendable (String) -> String {
        { sub in #"SELECT owner || '/' || name FROM "user" WHERE (apple='\#(sub)') AND "owner"='\#(organization)' LIMIT 1"# }
    }

    @Test("Casdoor's own lookup finds each Apple user under the new subject as the same user, in its organization only; the copies in properties follow")
    func lookup() async throws {
        let lookup = Self.getUserByField(Framework.casdoorOrganization)
        try await ServerLookup(apple: lookup, other: Self.getUserByField(Framework.casdoorOtherOrganization)) { world in
            for person in world.people {
                let email = try world.claims(try world.token(person.id))["email"]!.stringValue!
                let row = "FROM \"user\" WHERE owner || '/' || name = (\(lookup(person.newSub)))"
                #expect(try world.psql("SELECT email \(row)") == email)
                #expect(try world.psql("SELECT properties::jsonb->>'oauth_Apple_id' \(row)") == person.newSub)
                #expect(try world.psql("SELECT properties::jsonb->>'oauth_Apple_email' \(row)") == email)
                // What Baton leaves: Casdoor's own user ID (the `sub` of its tokens) and goth's claims inside `oauth_Apple_extra`.
                #expect(try world.psql("SELECT id \(row)") == person.oldSub)
                #expect(try world.psql("SELECT (properties::jsonb->>'oauth_Apple_extra')::jsonb->>'sub' \(row)") == person.oldSub)
            }
        }.run(.casdoor)
    }

    @Test("exchange records the duplicate, report lists it, merge releases its apple column to '' and Casdoor finds the original user")
    func merge() async throws {
        try await ReleaseMerge(lookup: Self.getUserByField(Framework.casdoorOrganization), rows: #"SELECT u::text FROM "user" u"#, releasedTo: "", leavesAppleRows: true).run(.casdoor)
    }

    @Test("rehearse: every Apple user migrates in the copy, no problem found, the source unchanged")
    func rehearse() async throws {
        try await SchemaRehearsal.run(.casdoor)
    }

    /// Without the partial index, doctor fails on the subject's uniqueness and prints it; with it, doctor names it, and
    /// the key `name` is unique through Casdoor's primary key.
    @Test("doctor fails on the subject's uniqueness until the partial unique index docs/schemas.md gives exists, then accepts it")
    func index() async throws {
        try await MissingIndex(statement: Framework.casdoorSubjectIndex, failure: "FAIL  subject uniqueness").run(.casdoor)
        try await SchemaWorld.run(.casdoor, apple: 1) { world in
            let doctor = try await runBatonOffPool(["doctor", "--config", try world.configuration()])
            #expect(doctor.stdout.contains(#"ok    subject uniqueness: unique index user_owner_apple_idx on (apple, owner) where ((apple)::text <> ''::text)"#), "\(doctor.stdout)")
            #expect(doctor.stdout.contains("ok    key uniqueness: unique index user_pkey on (name, owner)"), "\(doctor.stdout)")
            #expect(doctor.stdout.contains("ok    json copy: public.user.properties (text): subject keys oauth_Apple_id, email keys oauth_Apple_email"), "\(doctor.stdout)")
            // Casdoor's `id` (indexed, not unique) as the key: the advice names `name`, unique within the organization by
            // the primary key, or the index that would make `id` unique among the Apple users.
            let byID = try await runBatonOffPool(["doctor", "--config", try world.configuration { $0["key_column"] = "id" }])
            let failure = byID.stdout.split(separator: "\n").filter { $0.hasPrefix("FAIL") }
            #expect(failure == [#"FAIL  key uniqueness: legacy.key_column id is not unique among the rows legacy.where selects, so a rewrite could reach several rows; fix: name name (unique) in legacy.key_column, or run CREATE UNIQUE INDEX CONCURRENTLY ON "public"."user" ("owner", "id") WHERE "apple" <> ''"#], "\(byID.stdout)")
        }
    }
}
