import BatonJSON
import Foundation
import TestSupport
import Testing

/// Logto: one `users` table for every tenant, `users.identities` jsonb holding each social identity under the
/// connector's target, `{"apple": {"userId": <sub>, "details": {"id": <sub>, "email": …, "rawData": …}}}`, with no
/// index, unique or not, over it; the email in `users.primary_email`, unique per tenant. As logto-io/logto leaves them
/// at commit 1fbc554 (2026-08-21): packages/schemas/src/models/tenants.ts, packages/schemas/tables/_before_all.sql,
/// _functions.sql, users.sql, _after_each.sql (its trigger and row-level security for `users`) and _after_all.sql (the
/// grants and the `tenants` policy), as a fresh install creates them (packages/schemas/alterations, up to
/// next-1785835991-add-cimd-client-identifier-columns, bring an older database to the same columns in another order);
/// the tenants as packages/cli/src/commands/database/seed/tenant.ts makes them (a login role per tenant, in the
/// database's group role). An open-source install serves two tenants, `default` (the
/// application's users) and `admin` (the console's): the `admin` tenant holds Apple users with the Apple users' old
/// identifiers, and `default` holds Google users whose `google.userId` is an Apple user's old or new identifier.
extension Framework {
    static let logtoTenant = "default"
    static let logtoOtherTenant = "admin"

    static var logto: Framework { Framework(
        name: "logto",
        ddl: """
            DO $$ BEGIN EXECUTE format('create role %I noinherit', 'logto_tenant_' || current_database()); END $$;
            create table tenants (
                id varchar(21) not null,
                db_user varchar(128),
                db_user_password varchar(128),
                name varchar(128) not null default 'My Project',
                tag varchar(64) not null default 'development',
                created_at timestamptz not null default(now()),
                is_suspended boolean not null default false,
                primary key (id),
                constraint tenants__db_user
                  unique (db_user)
            );
            create function set_tenant_id() returns trigger as
            $f$ begin
              if new.tenant_id is not null then
                return new;
              end if;
              select tenants.id into new.tenant_id
                from tenants
                where tenants.db_user = current_user;
              return new;
            end; $f$ language plpgsql;
            create function set_updated_at() returns trigger as
            $f$ begin
              new.updated_at = now();
              return new;
            end; $f$ language plpgsql;
            create type users_password_encryption_method as enum ('Argon2i', 'Argon2id', 'Argon2d', 'SHA1', 'SHA256', 'MD5', 'Bcrypt', 'Legacy');
            create table users (
              tenant_id varchar(21) not null
                references tenants (id) on update cascade on delete cascade,
              id varchar(12) not null,
              username varchar(128),
              primary_email varchar(128),
              primary_phone varchar(128),
              password_encrypted varchar(256),
              password_encryption_method users_password_encryption_method,
              name varchar(128),
              avatar varchar(2048),
              profile jsonb not null default '{}'::jsonb,
              application_id varchar(21),
              cimd_client_id varchar(2048),
              identities jsonb not null default '{}'::jsonb,
              custom_data jsonb not null default '{}'::jsonb,
              logto_config jsonb not null default '{}'::jsonb,
              mfa_verifications jsonb not null default '[]'::jsonb,
              is_suspended boolean not null default false,
              is_password_expired boolean not null default false,
              last_sign_in_at timestamptz,
              password_updated_at timestamptz,
              created_at timestamptz not null default (now()),
              updated_at timestamptz not null default (now()),
              primary key (id),
              constraint users__username
                unique (tenant_id, username),
              constraint users__primary_email
                unique (tenant_id, primary_email),
              constraint users__primary_phone
                unique (tenant_id, primary_phone)
            );
            create unique index users__id
              on users (tenant_id, id);
            create index users__name
              on users (tenant_id, name);
            create index users_mfa_verifications_gin
              on users using gin (mfa_verifications jsonb_path_ops);
            create index users__tenant_lower_username
              on users (tenant_id, lower(username))
              where username is not null;
            create trigger set_updated_at
              before update on users
              for each row
              execute procedure set_updated_at();
            create trigger set_tenant_id before insert on users
              for each row execute procedure set_tenant_id();
            alter table users enable row level security;
            create policy users_tenant_id on users
              as restrictive
              using (tenant_id = (select id from tenants where db_user = current_user));
            create policy users_modification on users
              using (true);
            DO $$
            DECLARE tenant text; parent text := 'logto_tenant_' || current_database();
            BEGIN
              EXECUTE format('grant select, insert, update, delete on all tables in schema public to %I', parent);
              EXECUTE format('revoke all privileges on table tenants from %I', parent);
              EXECUTE format('grant select (id, db_user, is_suspended, tag) on table tenants to %I', parent);
              FOREACH tenant IN ARRAY ARRAY['\(logtoTenant)', '\(logtoOtherTenant)'] LOOP
                INSERT INTO tenants (id, db_user, db_user_password) VALUES (tenant, parent || '_' || tenant, md5(tenant));
                EXECUTE format('create role %I with inherit login in role %I', parent || '_' || tenant, parent);
              END LOOP;
            END $$;
            alter table tenants enable row level security;
            create policy tenants_tenant_id on tenants
              using (db_user = current_user);

            """,
        addApple: { i, sub, email in
            logtoUser(name: "apple\(i)", tenant: logtoTenant, email: email,
                      identities: appleIdentity(sub: sub, email: email, name: "Apple \(i)", gitHub: i % 2 == 0 ? "\(40_000 + i)" : nil))
        },
        // Even users (an Apple user's old identifier): an Apple user of the admin tenant, and a Google user of the default
        // tenant whose Google `userId` is that identifier; odd ones and the rest (new identifiers): Google users.
        addOther: { i, uid, email in
            let google = logtoUser(name: "google\(i)", tenant: logtoTenant, email: email, identities: googleIdentity(id: uid, email: email))
            guard i % 2 == 0 && i < 100 else { return google }
            return google + ";\n" + logtoUser(name: "admin\(i)", tenant: logtoOtherTenant, email: email,
                                              identities: appleIdentity(sub: uid, email: email, name: "Admin \(i)", gitHub: nil))
        },
        appleRow: { i in
            """
            SELECT (identities #>> '{apple,userId}') || '|' || coalesce(primary_email, '') || '|' || (identities #> '{apple,details}')::text
            FROM users WHERE tenant_id = '\(logtoTenant)' AND name = 'apple\(i)'
            """
        },
        setEmail: { i, email in "UPDATE users SET primary_email = '\(email)' WHERE tenant_id = '\(logtoTenant)' AND name = 'apple\(i)'" },
        invariant: """
            SELECT md5(string_agg(x, '|' ORDER BY x)) FROM (
                SELECT u::text AS x FROM users u WHERE NOT (\(logtoApple))
                UNION ALL SELECT u.id || (to_jsonb(u) - 'identities' - 'primary_email' - 'updated_at')::text
                                      || (u.identities #- '{apple,userId}' #- '{apple,details,id}')::text
                          FROM users u WHERE \(logtoApple)
                UNION ALL SELECT t::text FROM tenants t
            ) AS rows
            """,
        jsonSubjectKeys: ["id"],
        hasSubjectIndex: false
    ) }

    /// SQL: the rows of `users` the sample's `legacy` section is about (the default tenant's Apple users).
    static let logtoApple = "u.tenant_id = '\(logtoTenant)' AND u.identities ? 'apple'"

    /// A Logto user who signed up through a social connector, as Logto's `insertUser` leaves it (an id of 12 characters).
    private static func logtoUser(name: String, tenant: String, email: String, identities: String) -> String {
        """
        INSERT INTO users (tenant_id, id, primary_email, name, avatar, profile, identities, custom_data, logto_config, last_sign_in_at,
                           created_at, updated_at)
        VALUES ('\(tenant)', substr(md5('\(tenant)/\(name)'), 1, 12), '\(email)', '\(name)', 'https://example.com/\(name).png',
                '{"locale": "en-US"}', \(identities), '{"plan": "pro", "ref": "\(name)"}', '{"mfa": {"skipped": true}}',
                '2026-03-01 10:00:00+00', '2025-01-01 00:00:00+00', '2025-01-01 00:00:00+00')
        """
    }

    /// `identities` with the Apple connector's user info (`connector-apple`'s `getUserInfo`: `id`, `email`, `name`,
    /// `rawData` holding the callback's code and identity token), and beside it a GitHub identity of the ID `gitHub`.
    private static func appleIdentity(sub: String, email: String, name: String, gitHub: String?) -> String {
        let apple = """
            'apple', jsonb_build_object('userId', '\(sub)', 'details', jsonb_build_object('id', '\(sub)', 'email', '\(email)', 'name', '\(name)',
                     'rawData', jsonb_build_object('code', md5('code\(sub)'), 'id_token', 'eyJraWQiOiJBIn0.' || md5('\(sub)') || '.c2ln')))
            """
        let github = gitHub.map { ", 'github', jsonb_build_object('userId', '\($0)', 'details', jsonb_build_object('id', '\($0)', 'email', 'gh-\(email)'))" } ?? ""
        return "jsonb_build_object(\(apple)\(github))"
    }

    /// `identities` with the Google connector's user info.
    private static func googleIdentity(id: String, email: String) -> String {
        """
        jsonb_build_object('google', jsonb_build_object('userId', '\(id)', 'details', jsonb_build_object('id', '\(id)', 'email', '\(email)',
            'avatar', 'https://lh3.googleusercontent.com/a/x', 'rawData', jsonb_build_object('sub', '\(id)', 'email_verified', true))))
        """
    }
}

/// Logto's own lookups, run as Logto runs them: as the tenant's login role (`getTenantDatabaseDsn`), so that row-level
/// security keeps the query to that tenant, the query of `findUserByIdentity` (packages/core/src/queries/user.ts).
struct LogtoLookup {
    let world: SchemaWorld

    /// The ids of the users Logto finds in `tenant` for the connector `target` and the provider's user ID `sub`
    /// (`findUserByIdentity` expects at most one: `maybeOne`).
    func users(_ target: String, _ sub: String, tenant: String = Framework.logtoTenant) throws -> [String] {
        let role = try world.psql("SELECT db_user FROM tenants WHERE id = '\(tenant)'")
        let found = try world.psql("""
            SET ROLE "\(role)";
            select id from "users" where "identities"::json#>>'{"\(target)",userId}' = '\(sub)'
            """)
        return found.split(separator: "\n").map(String.init)
    }

    /// The one user Logto finds for an Apple sign-in carrying `sub` in `tenant`; empty when none.
    func apple(_ sub: String, tenant: String = Framework.logtoTenant) throws -> String {
        let found = try users("apple", sub, tenant: tenant)
        #expect(found.count <= 1, "findUserByIdentity is maybeOne: \(found)")
        return found.first ?? ""
    }
}

/// Every row of `users` as `row_to_json` gives it, by id.
private func logtoRows(_ world: SchemaWorld) throws -> [String: String] {
    let lines = try world.psql("SELECT id || ' ' || row_to_json(u)::text FROM users u ORDER BY id").split(separator: "\n")
    return Dictionary(uniqueKeysWithValues: lines.map { line in
        let space = line.firstIndex(of: " ")!
        return (String(line[..<space]), String(line[line.index(after: space)...]))
    })
}

/// An Apple user's row without what a migration may write: every column but `identities`, `primary_email` and
/// `updated_at` (Logto's `set_updated_at` trigger stamps every update), then `identities` without `apple.userId` and
/// `apple.details.id` (`apple.details.email` keeps the address of the user's last sign-in through Logto).
private func logtoKept(_ world: SchemaWorld, id: String) throws -> String {
    try world.psql("""
        SELECT (to_jsonb(u) - 'identities' - 'primary_email' - 'updated_at')::text || ' '
            || (identities #- '{apple,userId}' #- '{apple,details,id}')::text
        FROM users u WHERE id = '\(id)'
        """)
}

@Suite("Logto users table with several tenants, through the built binary")
struct SchemaLogtoTests {
    /// The sign-ins (one, eight at once, with an email another user holds, after the application changed the email,
    /// unmatched), the bulk exchange racing eight sign-ins of one user, then Logto's own lookup.
    @Test("sign-ins (eight at once), the exchange racing sign-ins: each Apple user once; Logto's lookup finds the same user under the new subject only; other rows byte for byte")
    func scenario() async throws {
        try await SchemaWorld.run(.logto, apple: 6) { world in
            let people = world.people
            let logto = LogtoLookup(world: world)
            let appleIDs = try people.indices.map { try world.psql("SELECT id FROM users WHERE tenant_id = 'default' AND name = 'apple\($0)'") }
            #expect(try people.indices.allSatisfy { try logto.apple(people[$0].oldSub) == appleIDs[$0] })
            let adminIDs = try people.map { try logto.apple($0.oldSub, tenant: Framework.logtoOtherTenant) }
            let googleIDs = try people.map { try logto.users("google", $0.oldSub) }
            #expect(!adminIDs.contains("") && googleIDs.allSatisfy { $0.count == 1 }, "\(adminIDs) \(googleIDs)")
            for person in people { #expect(try logto.apple(person.newSub) == "", "no account under a new subject yet") }

            // No index can make the subject unique: doctor warns with the expression index, and fails nothing.
            let doctor = try await runBatonOffPool(["doctor", "--config", try world.configuration()])
            #expect(doctor.status == 0 && !doctor.stdout.contains("FAIL"), "\(doctor.stdout)")
            let warning = doctor.stdout.split(separator: "\n").first { $0.hasPrefix("warn  subject uniqueness") }
            #expect(warning?.contains("; fix: CREATE UNIQUE INDEX CONCURRENTLY") == true, "\(doctor.stdout)")

            // The sender's walk takes the default tenant's Apple users only (not its Google users, not the admin tenant).
            let ids = try await runBatonOffPool(["transfer-ids", "--yes", "--rate", "100", "--config", try world.configuration()])
            #expect(ids.status == 0, "\(ids.stdout)\(ids.stderr)")
            #expect(try world.count("SELECT count(*) FROM baton.transfers WHERE transfer_sub IS NOT NULL") == people.count)
            #expect(try Set(world.psql("SELECT string_agg(old_sub, ',') FROM baton.transfers").split(separator: ",").map(String.init))
                    == Set(people.map(\.oldSub)))

            // The application changed user 3's email; another user of the tenant holds user 2's new relay address.
            let newEmail2 = try world.claims(try world.token(people[2].id))["email"]!.stringValue!
            _ = try world.psql(Framework.logto.setEmail(3, "person3@example.com"))
            _ = try world.psql(Framework.logto.addOther(101, "unrelated-101", newEmail2))
            let before = try logtoRows(world)
            let kept = try appleIDs.map { try logtoKept(world, id: $0) }
            let invariant = try world.psql(Framework.logto.invariant)

            try await world.serving { port in
                let first = await SchemaHTTP.signIn(port: port, token: try world.token(people[0].id))
                #expect(first.status == 200 && first.outcome == "migrated", "\(first)")

                // Eight first sign-ins of one user at once: no index to stop a second rewrite, Baton's lock does.
                let token1 = try world.token(people[1].id)
                let answers = await withTaskGroup(of: SchemaHTTP.Answer.self) { group in
                    for _ in 0..<8 { group.addTask { await SchemaHTTP.signIn(port: port, token: token1) } }
                    return await group.reduce(into: []) { $0.append($1) }
                }
                #expect(answers.allSatisfy { $0.status == 200 }, "\(answers)")
                #expect(answers.filter { $0.outcome == "migrated" }.count == 1 && answers.filter { $0.outcome == "current" }.count == 7, "\(answers)")

                let third = await SchemaHTTP.signIn(port: port, token: try world.token(people[2].id))
                #expect(third.status == 200 && third.outcome == "migrated", "\(third)")
                #expect(try world.count("SELECT count(*) FROM baton.events WHERE kind = 'email_conflict' AND new_email = '\(newEmail2)'") == 1)
                let fourth = await SchemaHTTP.signIn(port: port, token: try world.token(people[3].id))
                #expect(fourth.status == 200 && fourth.outcome == "migrated", "\(fourth)")
                let stranger = await SchemaHTTP.signIn(port: port, token: try world.token(world.stranger))
                #expect(stranger.status == 200 && stranger.outcome == "unmatched", "\(stranger)")

                // The bulk exchange while eight sign-ins of user 4 arrive at once.
                let token4 = try world.token(people[4].id)
                let config = try world.configuration()
                async let exchange = runBatonOffPool(["exchange", "--config", config])
                let raced = await withTaskGroup(of: SchemaHTTP.Answer.self) { group in
                    for _ in 0..<8 { group.addTask { await SchemaHTTP.signIn(port: port, token: token4) } }
                    return await group.reduce(into: []) { $0.append($1) }
                }
                let exchanged = try await exchange
                #expect(exchanged.status == 0, "\(exchanged.stdout)\(exchanged.stderr)")
                #expect(raced.allSatisfy { $0.status == 200 && ($0.outcome == "migrated" || $0.outcome == "current") }, "\(raced)")
                #expect(raced.filter { $0.outcome == "migrated" }.count <= 1, "\(raced)")
            }

            // Each Apple user migrated exactly once, by a sign-in or by the exchange.
            for person in people {
                #expect(try world.count("SELECT count(*) FROM baton.events WHERE kind = 'migrated' AND old_sub = '\(person.oldSub)'") == 1)
            }
            #expect(try world.count("SELECT count(*) FROM baton.transfers WHERE state = 'migrated'") == people.count)

            // Logto's own lookup: the same user under the new subject, none under the old; details.id follows.
            for (i, person) in people.enumerated() {
                #expect(try logto.apple(person.newSub) == appleIDs[i], "user \(i) under the new subject")
                #expect(try logto.apple(person.oldSub) == "", "user \(i) no longer under the old subject")
                #expect(try world.psql("SELECT identities #>> '{apple,details,id}' FROM users WHERE id = '\(appleIDs[i])'") == person.newSub)
                #expect(try world.count("SELECT count(*) FROM users WHERE identities #>> '{apple,userId}' = '\(person.newSub)'") == 1)
                // The admin tenant's Apple user and the Google user holding the same string still lead where they led.
                #expect(try logto.apple(person.oldSub, tenant: Framework.logtoOtherTenant) == adminIDs[i])
                #expect(try logto.users("google", person.oldSub) == googleIDs[i])
            }

            // The email: the new relay address; kept where another user holds it (2) and where the user gave one (3).
            for (i, person) in people.enumerated() {
                let relay = try world.claims(try world.token(person.id))["email"]!.stringValue!
                let expected = i == 2 ? person.email : i == 3 ? "person3@example.com" : relay
                #expect(try world.psql("SELECT primary_email FROM users WHERE id = '\(appleIDs[i])'") == expected, "user \(i)'s primary_email")
            }

            // Every other row byte for byte; in the Apple users' rows, everything but the rewritten values.
            let after = try logtoRows(world)
            #expect(Set(after.keys) == Set(before.keys))
            for (id, row) in before where !appleIDs.contains(id) { #expect(after[id] == row, "user \(id)") }
            for (i, id) in appleIDs.enumerated() {
                #expect(try logtoKept(world, id: id) == kept[i], "user \(i)'s other columns and keys")
                #expect(after[id] != before[id], "user \(i) migrated")
            }
            #expect(try world.psql(Framework.logto.invariant) == invariant)

            let report = try await runBatonOffPool(["report", "--format", "json", "--config", try world.configuration()])
            #expect(report.status == 0, "\(report.stderr)")
            let json = try JSON.parseObject(Array(report.stdout.utf8))
            #expect(json["totals"]?["migrated"]?.intValue == Int64(people.count), "\(report.stdout.prefix(400))")
            #expect(json["totals"]?["unmatched_signins"]?.intValue == 1, "\(report.stdout.prefix(400))")
        }
    }

    /// A user who signed in past Baton after the acceptance has a second Logto account under the new identifier.
    @Test("a duplicate account: the exchange records the pair, the report lists it, merge leaves Logto finding the real account only")
    func merge() async throws {
        try await SchemaWorld.run(.logto, apple: 2) { world in
            let logto = LogtoLookup(world: world)
            let person = world.people[0]
            let real = try logto.apple(person.oldSub)
            let newEmail = try world.claims(try world.token(person.id))["email"]!.stringValue!
            _ = try world.psql(Framework.logto.addApple(50, person.newSub, newEmail))
            let fresh = try logto.apple(person.newSub)
            #expect(!real.isEmpty && !fresh.isEmpty && real != fresh)
            let second = try logto.apple(world.people[1].oldSub)
            let before = try logtoRows(world)
            let secondKept = try logtoKept(world, id: second)
            /// The fresh account's columns but the identities (and `updated_at`, which Logto's trigger stamps).
            let freshColumns = "SELECT (to_jsonb(u) - 'identities' - 'updated_at')::text FROM users u WHERE id = '\(fresh)'"
            let freshBefore = try world.psql(freshColumns)
            let config = try world.configuration()
            // The sender's walk finds no transfer identifier for the fresh account (its subject is the receiving team's).
            let ids = try await runBatonOffPool(["transfer-ids", "--yes", "--rate", "100", "--config", config])
            #expect(ids.stdout.contains("done 2,") && ids.stdout.contains("unresolvable 1,"), "\(ids.stdout)\(ids.stderr)")

            let exchange = try await runBatonOffPool(["exchange", "--config", config])
            #expect(exchange.status == 1 && exchange.stdout.contains("done 1,") && exchange.stdout.contains("unresolvable 1,"), "\(exchange.stdout)\(exchange.stderr)")
            #expect(try logto.apple(world.people[1].newSub) == second, "the other Apple user migrated")
            #expect(try logto.users("apple", person.oldSub) == [real] && logto.users("apple", person.newSub) == [fresh], "nothing moves")

            let report = try await runBatonOffPool(["report", "--format", "json", "--config", config])
            let duplicates = try JSON.parseObject(Array(report.stdout.utf8))["duplicates"]
            #expect(duplicates?["count"]?.intValue == 1, "\(report.stdout.suffix(600))")
            #expect(duplicates?["items"]?.arrayValue?.first?["merged"]?.boolValue == false)

            let dryRun = try await runBatonOffPool(["merge", "--dry-run", "--config", config])
            #expect(dryRun.status == 0 && dryRun.stdout.hasSuffix("would merge 1\n"), "\(dryRun.stdout)\(dryRun.stderr)")
            #expect(try logto.users("apple", person.newSub) == [fresh], "a dry run changes nothing")

            let merge = try await runBatonOffPool(["merge", "--yes", "--config", config])
            #expect(merge.status == 0 && merge.stdout.contains("merged 1;"), "\(merge.stdout)\(merge.stderr)")
            #expect(try logto.apple(person.newSub) == real, "Logto finds the real account under the new subject")
            #expect(try logto.apple(person.oldSub) == "")
            #expect(try world.psql("SELECT identities #>> '{apple,details,id}' FROM users WHERE id = '\(real)'") == person.newSub)
            #expect(try world.count("SELECT count(*) FROM baton.events WHERE kind = 'duplicate_merged'") == 1)

            // The fresh account keeps every column but the released identity; the second Apple user (migrated by the
            // exchange) everything but the rewritten values; every other user is untouched.
            let after = try logtoRows(world)
            for (id, row) in before where ![real, fresh, second].contains(id) { #expect(after[id] == row, "user \(id)") }
            #expect(try logtoKept(world, id: second) == secondKept)
            #expect(try world.psql(freshColumns) == freshBefore)
            #expect(try world.psql("SELECT identities #>> '{apple,userId}' FROM users WHERE id = '\(fresh)'") == "baton-released:\(person.newSub)")
            let again = try await runBatonOffPool(["merge", "--yes", "--config", config])
            #expect(again.status == 0 && again.stdout.hasPrefix("merged 0;"), "\(again.stdout)")
        }
    }

    /// The expression index docs/schemas.md gives: doctor prints it while it is missing, and takes it once it exists.
    @Test("doctor warns with the expression index docs/schemas.md gives, and reports it unique once it exists")
    func expressionIndex() async throws {
        try await SchemaWorld.run(.logto, apple: 1) { world in
            let doctor = try await runBatonOffPool(["doctor", "--config", try world.configuration()])
            let warning = try #require(doctor.stdout.split(separator: "\n").first { $0.hasPrefix("warn  subject uniqueness") }, "\(doctor.stdout)")
            let statement = try #require(warning.range(of: "; fix: ").map { String(warning[$0.upperBound...]) })
            let docs = try String(contentsOf: packageRoot.appendingPathComponent("docs/schemas.md"), encoding: .utf8)
            #expect(docs.contains(statement + ";"), "docs/schemas.md gives \(statement)")
            _ = try world.psql(statement.replacingOccurrences(of: "INDEX CONCURRENTLY ON", with: "INDEX ON"))
            let indexed = try await runBatonOffPool(["doctor", "--config", try world.configuration()])
            #expect(indexed.status == 0 && indexed.stdout.contains("ok    subject uniqueness: unique index"), "\(indexed.stdout)")
            #expect(!indexed.stdout.contains("warn  subject uniqueness"), "\(indexed.stdout)")
        }
    }
}
