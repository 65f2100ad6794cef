import Foundation
import TestSupport
import Testing

/// `baton rehearse` on sources as applications have them (issue 44): the copy carries what the named tables need
/// (an extension's type, enums, domains, composite types, a sequence another object owns), a restore error stops the
/// rehearsal with PostgreSQL's own words, the summary says what a rehearsal cannot predict, and the source database
/// can come from the configuration's `database.url`.
@Suite("Rehearse: what the tables need, restore errors, the summary's limits", .serialized)
struct RehearseSourceSchemaTests {
    /// Runs `baton rehearse --config CONFIG` with `arguments`, `--json` beside the configuration, and decodes the JSON.
    func rehearse(_ config: String, _ arguments: [String], environment: [String: String]? = nil) async throws
        -> (ProcessResult, RehearseCommandTests.Output?) {
        let json = (config as NSString).deletingLastPathComponent + "/out.json"
        let result = try await runBatonOffPool(["rehearse", "--config", config, "--json", json] + arguments, environment: environment)
        let output = try? JSONDecoder().decode(RehearseCommandTests.Output.self, from: Data(contentsOf: URL(fileURLWithPath: json)))
        return (result, output)
    }

    /// A Rails application with Devise and OmniAuth as a newcomer has it: `users` with a `citext` email (and a `citext[]`),
    /// an enum and a domain column, a composite type made of an enum (created first, though its name sorts after), a
    /// default drawing on a sequence no table owns, a foreign key to a table the rehearsal does not copy;
    /// `authentications (user_id, provider, uid)` with Apple and Google rows.
    static let railsSchema = """
        CREATE EXTENSION IF NOT EXISTS citext;
        CREATE TYPE user_role AS ENUM ('member', 'admin');
        CREATE DOMAIN display_name AS text CHECK (length(VALUE) <= 80);
        CREATE TYPE zone AS ENUM ('north', 'south');
        CREATE TYPE postal_address AS (street text, city text, zone zone);
        CREATE SEQUENCE invoice_numbers;
        CREATE TABLE organizations (id bigserial PRIMARY KEY, name text);
        CREATE TABLE users (id serial PRIMARY KEY, email citext NOT NULL DEFAULT '', role user_role NOT NULL DEFAULT 'member',
            name display_name, address postal_address, aliases citext[], invoice_number bigint DEFAULT nextval('invoice_numbers'),
            organization_id bigint REFERENCES organizations (id), created_at timestamp(6) NOT NULL DEFAULT now());
        CREATE UNIQUE INDEX index_users_on_email ON users (email);
        CREATE TABLE authentications (id bigserial PRIMARY KEY, user_id integer NOT NULL REFERENCES users (id),
            provider character varying NOT NULL, uid character varying NOT NULL);
        CREATE UNIQUE INDEX index_authentications_on_provider_and_uid ON authentications (provider, uid);
        INSERT INTO organizations (name) VALUES ('Acme');

        """

    /// The `legacy` section for ``railsSchema``: the identity table, the email in `users`.
    static var railsLegacy: [String: Any] {
        ["table": "public.authentications", "key_column": "id", "subject_column": "uid", "where": ["provider": "apple"],
         "email": ["table": "public.users", "column": "email", "key_column": "id", "reference_column": "user_id"],
         "email_policy": "relay"]
    }

    @Test("a Rails schema with a citext email, an enum, a domain, a composite type, a serial id: the rehearsal copies what the tables need and succeeds")
    func railsCitext() async throws {
        try await withDatabase("rehearse_rails") { source in
            var sql = Self.railsSchema
            for i in 1...12 {
                sql += """
                    WITH u AS (INSERT INTO users (email, role, name, address, aliases, organization_id)
                               VALUES ('A\(i)@PrivateRelay.AppleID.com', '\(i == 1 ? "admin" : "member")', 'Name \(i)', ROW('\(i) Main St', 'Springfield', 'north'),
                                       ARRAY['a\(i)@example.com']::citext[], 1) RETURNING id)
                    INSERT INTO authentications (user_id, provider, uid) SELECT id, 'apple', '\(RehearseCommandTests.sub(i))' FROM u;

                    """
            }
            for i in 1...4 {
                sql += """
                    WITH u AS (INSERT INTO users (email) VALUES ('g\(i)@gmail.com') RETURNING id)
                    INSERT INTO authentications (user_id, provider, uid) SELECT id, 'google_oauth2', '10987654321\(i)' FROM u;

                    """
            }
            let script = sql
            _ = try await offPool { try TestDatabase.psql(source, script) }
            let config = try RehearseCommandTests.configuration(Self.railsLegacy)
            let before = try await offPool { try RehearseCommandTests.digest(source) }
            let (result, output) = try await rehearse(config, ["--from", source])
            #expect(result.status == 0, "\(result.stdout)\(result.stderr)")
            #expect(try await offPool { try RehearseCommandTests.digest(source) } == before)
            let out = try #require(output, "\(result.stderr)")
            #expect(out.selected == 12 && out.problems.isEmpty, "\(out.problems)")
            #expect(out.by_signin + out.by_exchange == 12, "\(result.stdout)")
            // The foreign key to a table the rehearsal does not copy is left out, and said so.
            #expect(result.stderr.contains("not copied: foreign key users_organization_id_fkey of public.users (references public.organizations)"),
                    "\(result.stderr)")
        }
    }

    @Test("a restore error stops the rehearsal with PostgreSQL's error and the statement, not an inspection message blaming the configuration")
    func restoreErrorStops() async throws {
        try await withDatabase("rehearse_restore") { source in
            // The column's default calls a function of the application's, which the copy brings; its body reads a table
            // the copy does not hold, so creating it in the copy fails.
            _ = try await offPool {
                try TestDatabase.psql(source, """
                    CREATE TABLE tokens (token text);
                    CREATE FUNCTION new_token() RETURNS text LANGUAGE sql AS $$ SELECT token FROM public.tokens LIMIT 1 $$;
                    CREATE TABLE users (id bigint PRIMARY KEY, apple_sub text UNIQUE, email text, token text DEFAULT new_token());
                    INSERT INTO users (id, apple_sub, email) VALUES (1, '\(RehearseCommandTests.sub(1))', 'u1@example.com');
                    """)
            }
            let config = try RehearseCommandTests.configuration(["table": "public.users", "key_column": "id", "subject_column": "apple_sub", "email_column": "email"])
            let clustersBefore = RehearseCommandTests.clusters()
            let (result, output) = try await rehearse(config, ["--from", source])
            #expect(result.status == 1, "\(result.stderr)")
            #expect(output == nil)
            #expect(result.stderr.contains("copying the tables stopped at the first error"), "\(result.stderr)")
            #expect(result.stderr.contains("relation \"public.tokens\" does not exist"), "\(result.stderr)")
            #expect(result.stderr.contains("Command was: CREATE OR REPLACE FUNCTION public.new_token()"), "\(result.stderr)")
            #expect(!result.stderr.contains("fix:"), "\(result.stderr)")
            #expect(RehearseCommandTests.clusters().isSubset(of: clustersBefore))
        }
    }

    @Test("the summary says what a rehearsal cannot predict, also when it found no problem")
    func summaryLimits() async throws {
        try await withDatabase("rehearse_limits") { source in
            var sql = "CREATE TABLE users (id bigint PRIMARY KEY, apple_sub text UNIQUE, email text UNIQUE);\n"
            for i in 1...6 { sql += "INSERT INTO users VALUES (\(i), '\(RehearseCommandTests.sub(i))', 'u\(i)@example.com');\n" }
            let script = sql
            _ = try await offPool { try TestDatabase.psql(source, script) }
            let config = try RehearseCommandTests.configuration(["table": "public.users", "key_column": "id", "subject_column": "apple_sub", "email_column": "email"])
            let (result, output) = try await rehearse(config, ["--from", source])
            #expect(result.status == 0, "\(result.stdout)\(result.stderr)")
            #expect(output?.problems.isEmpty == true)
            #expect(result.stdout.contains("no problem found in the copy"), "\(result.stdout)")
            for line in [
                "What a rehearsal cannot predict",
                "subjects Apple no longer knows",
                "Apple's real rate limits, errors and outages",
                "a second account",
            ] {
                #expect(result.stdout.contains(line), "missing '\(line)' in \(result.stdout)")
            }
        }
    }

    @Test("the source can be the configuration's database.url; --from overrides it, and a configuration without database.url is enough with --from")
    func sourceFromConfiguration() async throws {
        try await withDatabase("rehearse_dburl") { source in
            var sql = "CREATE TABLE users (id bigint PRIMARY KEY, apple_sub text UNIQUE, email text UNIQUE);\n"
            for i in 1...4 { sql += "INSERT INTO users VALUES (\(i), '\(RehearseCommandTests.sub(i))', 'u\(i)@example.com');\n" }
            let script = sql
            _ = try await offPool { try TestDatabase.psql(source, script) }
            let legacy: [String: Any] = ["table": "public.users", "key_column": "id", "subject_column": "apple_sub", "email_column": "email"]

            // --config alone: database.url is the source.
            let withURL = try Self.configuration(["database": ["url": source], "apple": ["client_ids": ["com.example.app"]], "legacy": legacy])
            let (fromConfig, fromConfigOutput) = try await rehearse(withURL, [])
            #expect(fromConfig.status == 0, "\(fromConfig.stderr)")
            #expect(fromConfigOutput?.selected == 4)

            // --from overrides database.url (here a server that does not exist).
            let elsewhere = try Self.configuration(["database": ["url": "postgresql://postgres@/nowhere?host=/nonexistent-baton&port=1"],
                                                    "apple": ["client_ids": ["com.example.app"]], "legacy": legacy])
            let (overridden, overriddenOutput) = try await rehearse(elsewhere, ["--from", source])
            #expect(overridden.status == 0, "\(overridden.stderr)")
            #expect(overriddenOutput?.selected == 4)

            // A configuration without database.url, and --from.
            let withoutURL = try Self.configuration(["apple": ["client_ids": ["com.example.app"]], "legacy": legacy])
            let (given, givenOutput) = try await rehearse(withoutURL, ["--from", source])
            #expect(given.status == 0, "\(given.stderr)")
            #expect(givenOutput?.selected == 4)

            // A --from libpq refuses is named as --from, not as database.url.
            let (malformed, _) = try await rehearse(withoutURL, ["--from", "postgresql://%zz"])
            #expect(malformed.status == 2 && malformed.stderr.contains("--from: not a libpq connection string"), "\(malformed.stderr)")

            // Neither (an empty BATON_DATABASE_URL removes database.url, as every BATON_* variable does its key): one
            // line saying what to give.
            let (neither, _) = try await rehearse(withoutURL, [], environment: ["BATON_DATABASE_URL": ""])
            #expect(neither.status == 2)
            #expect(neither.stderr.contains("no source database: give --from URL or database.url in the configuration"), "\(neither.stderr)")
        }
    }

    @Test("db migrate and db status read database.url from --config; without any database the error names every way to give one")
    func dbMigrateWithConfig() async throws {
        try await withDatabase("migrate_config") { url in
            let config = try Self.configuration(["database": ["url": url], "apple": ["client_ids": ["com.example.app"]],
                                                 "legacy": ["table": "public.users", "key_column": "id", "subject_column": "apple_sub"]])
            let migrate = try await runBatonOffPool(["db", "migrate", "--config", config])
            #expect(migrate.status == 0, "\(migrate.stderr)")
            #expect(migrate.stdout.contains("applied 0001_"), "\(migrate.stdout)")
            let tables = try await offPool { try TestDatabase.psql(url, "SELECT count(*) FROM pg_tables WHERE schemaname = 'baton' AND tablename = 'transfers'") }
            #expect(tables == "1")
            let status = try await runBatonOffPool(["db", "status", "--config", config])
            #expect(status.status == 0 && status.stdout.contains("applied  0001_") && !status.stdout.contains("pending"), "\(status.stdout)\(status.stderr)")

            let none = try await runBatonOffPool(["db", "migrate"], environment: ["BATON_DATABASE_URL": ""])
            #expect(none.status == 2)
            #expect(none.stderr.contains("give --database-url URL, set BATON_DATABASE_URL, or --config FILE"), "\(none.stderr)")
        }
    }

    /// Writes `tree` as `baton.json` in a fresh directory and returns its path.
    static func configuration(_ tree: [String: Any]) throws -> String {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("rehearse-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let path = directory.appendingPathComponent("baton.json")
        try JSONSerialization.data(withJSONObject: tree).write(to: path)
        return path.path
    }
}
