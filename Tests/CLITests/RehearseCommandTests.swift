import Foundation
import TestSupport
import Testing

/// `baton rehearse` through the built binary, against source databases on the test server: planted problems,
/// a clean allauth source, configuration errors, and the source left unchanged.
@Suite("Rehearse command", .serialized)
struct RehearseCommandTests {
    /// An Apple-shaped subject for row `i`.
    static func sub(_ i: Int) -> String {
        String(format: "%06d.%032x.%04d", i, i * 7_919, i % 10_000)
    }

    /// A configuration of `legacy` (and `jobs`, when given), with no secret files, written to a fresh directory.
    static func configuration(_ legacy: [String: Any], jobs: [String: Any]? = nil) throws -> String {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("rehearse-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        var tree: [String: Any] = ["database": ["url": "postgresql:///unused"], "apple": ["client_ids": ["com.example.app"]], "legacy": legacy]
        tree["jobs"] = jobs
        let path = directory.appendingPathComponent("baton.json")
        try JSONSerialization.data(withJSONObject: tree).write(to: path)
        return path.path
    }

    /// A digest of every row of every table of the database, and of its schema.
    static func digest(_ url: String) throws -> String {
        let tables = try TestDatabase.psql(url, """
            SELECT string_agg(format('%I.%I', schemaname, tablename), ' ' ORDER BY 1) FROM pg_tables
            WHERE schemaname NOT IN ('pg_catalog', 'information_schema')
            """).split(separator: " ")
        var parts = [try TestDatabase.psql(url, "SELECT md5(string_agg(format('%s %s %s', table_name, column_name, data_type), ',' ORDER BY 1)) FROM information_schema.columns WHERE table_schema = 'public'")]
        for table in tables {
            parts.append(String(table) + "=" + (try TestDatabase.psql(url, "SELECT md5(coalesce(string_agg(t::text, '|' ORDER BY t::text), '')) FROM \(table) AS t")))
        }
        return parts.joined(separator: ";")
    }

    /// The rehearsal clusters' directories in /tmp.
    static func clusters() -> Set<String> {
        Set(((try? FileManager.default.contentsOfDirectory(atPath: "/tmp")) ?? []).filter { $0.hasPrefix("baton-rehearse.") })
    }

    struct Output: Decodable {
        struct Problem: Decodable { var kind: String; var count: Int; var examples: [String] }
        struct Projection: Decodable { var rate_per_s: Double; var processes: Int; var days: Double }
        var selected: Int
        var by_signin: Int
        var by_exchange: Int
        var problems: [Problem]
        var projection: Projection
    }

    func rehearse(_ config: String, _ source: String, _ extra: [String] = []) async throws -> (ProcessResult, Output?) {
        let json = (config as NSString).deletingLastPathComponent + "/out.json"
        let result = try await runBatonOffPool(["rehearse", "--config", config, "--from", source, "--json", json] + extra)
        let output = try? JSONDecoder().decode(Output.self, from: Data(contentsOf: URL(fileURLWithPath: json)))
        return (result, output)
    }

    @Test("planted problems: exit 1, each kind counted with its keys; the source unchanged")
    func plantedProblems() async throws {
        try await withDatabase("rehearse") { source in
            var sql = """
                CREATE TABLE users (id bigint PRIMARY KEY, provider text NOT NULL, apple_sub text, email text, profile jsonb);

                """
            for i in 1...20 {
                sql += "INSERT INTO users VALUES (\(i), 'apple', '\(Self.sub(i))', 'u\(i)@example.com', '{\"sub\": \"\(Self.sub(i))\"}');\n"
            }
            sql += """
                INSERT INTO users VALUES (21, 'apple', NULL, 'u21@example.com', NULL);
                INSERT INTO users VALUES (22, 'apple', '\(Self.sub(1))', 'u22@example.com', NULL);
                INSERT INTO users VALUES (23, 'apple', '\(Self.sub(23))', 'U2@example.com', NULL);
                INSERT INTO users VALUES (24, 'google', '\(Self.sub(24))', 'u24@example.com', NULL);
                INSERT INTO users VALUES (25, 'apple', '\(Self.sub(25))', 'u25@example.com', '{"sub": "\(Self.sub(99))"}');
                INSERT INTO users VALUES (26, 'apple', 'not-an-apple-sub', 'u26@example.com', NULL);
                """
            let script = sql
            _ = try await offPool { try TestDatabase.psql(source, script) }
            let config = try Self.configuration(["table": "public.users", "key_column": "id", "subject_column": "apple_sub", "email_column": "email",
                                                 "where": ["provider": "apple"], "json": ["column": "profile", "subject_keys": ["sub"]]])
            let before = try await offPool { try Self.digest(source) }
            let clustersBefore = Self.clusters()
            let (result, output) = try await rehearse(config, source, ["--signin-share", "0.5", "--rate", "1", "--processes", "2"])
            #expect(result.status == 1, "\(result.stderr)")
            let after = try await offPool { try Self.digest(source) }
            #expect(before == after)
            let out = try #require(output)
            #expect(out.selected == 25)
            #expect(out.by_signin + out.by_exchange == 22)
            #expect(out.by_signin == 11 && out.by_exchange == 11)
            let problems = Dictionary(uniqueKeysWithValues: out.problems.map { ($0.kind, $0) })
            #expect(problems["subject_null"]?.count == 1 && problems["subject_null"]?.examples == ["21"])
            #expect(problems["subject_duplicate"]?.count == 2 && problems["subject_duplicate"]?.examples == ["1", "22"])
            #expect(problems["email_conflict"]?.count == 2 && problems["email_conflict"]?.examples == ["2", "23"])
            #expect(problems["filtered_apple_like"]?.examples == ["24"])
            #expect(problems["json_mismatch"]?.examples == ["25"])
            #expect(problems["subject_malformed"]?.examples == ["26"])
            #expect(problems["missing_unique"]?.count == 1)
            #expect(problems["shared_subject"] == nil)
            #expect(out.projection.processes == 2 && out.projection.rate_per_s == 1)
            #expect(abs(out.projection.days - (Double(out.by_exchange) / 2 / 86_400 * 1_000).rounded() / 1_000) < 1e-9)
            #expect(result.stdout.contains("subject_duplicate: 2 (e.g. 1, 22)"))
            // The throwaway cluster is gone (stopped and deleted): no directory beyond those of other runs.
            #expect(Self.clusters().isSubset(of: clustersBefore), "\(Self.clusters())")
        }
    }

    @Test("a clean allauth source with the sample configuration's legacy section: exit 0, every Apple row migrates")
    func cleanAllauth() async throws {
        try await withDatabase("rehearse") { source in
            let framework = Framework.allauth
            var sql = framework.ddl
            for i in 1...30 { sql += framework.addApple(i, Self.sub(i), "a\(i)@privaterelay.appleid.com") + ";\n" }
            for i in 1...5 { sql += framework.addOther(100 + i, "10987654321\(i)", "g\(i)@gmail.com") + ";\n" }
            let script = sql
            _ = try await offPool { try TestDatabase.psql(source, script) }
            let config = try Self.configuration(framework.legacy)
            let before = try await offPool { try Self.digest(source) }
            let (result, output) = try await rehearse(config, source)
            #expect(result.status == 0, "\(result.stdout)\(result.stderr)")
            #expect(try await offPool { try Self.digest(source) } == before)
            let out = try #require(output)
            #expect(out.selected == 30 && out.problems.isEmpty)
            #expect(out.by_signin == 9 && out.by_exchange == 21)
            #expect(out.projection.rate_per_s == 10 && out.projection.processes == 1)
            #expect(result.stdout.contains("no problem found"))
        }
    }

    @Test("the application's database busy (jobs.max_active_backends): the rehearsal waits before it copies the tables, then runs")
    func busySource() async throws {
        try await withDatabase("rehearse") { source in
            let framework = Framework.allauth
            var sql = framework.ddl
            for i in 1...10 { sql += framework.addApple(i, Self.sub(i), "a\(i)@privaterelay.appleid.com") + ";\n" }
            let script = sql
            _ = try await offPool { try TestDatabase.psql(source, script) }
            let config = try Self.configuration(framework.legacy, jobs: ["max_active_backends": 1])
            let busy = try await BusyBackends(2, on: source)
            let json = (config as NSString).deletingLastPathComponent + "/out.json"
            let rehearsal = try runProcessAsync(batonBinaryPath, ["rehearse", "--config", config, "--from", source, "--json", json])
            // The throwaway cluster starts first; then the throttle's probe connects to the source (as `baton`).
            var probing = false
            for _ in 0..<600 where !probing {
                probing = try await offPool { try TestDatabase.psql(source, "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'baton'") } != "0"
                if !probing { try await Task.sleep(for: .milliseconds(50)) }
            }
            #expect(probing, "the rehearsal never probed the source")
            // Nothing is read from the source while it is busy.
            for _ in 0..<3 {
                try await Task.sleep(for: .seconds(1))
                #expect(try await offPool { try TestDatabase.psql(source, "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'pg_dump'") } == "0")
            }
            try await busy.end()
            let result = try await offPool { try rehearsal.wait(timeout: 300) }
            #expect(result.status == 0, "\(result.stdout)\(result.stderr)")
            let paused = try #require(result.stderr.range(of: "pausing: claiming no new work until the database is clear"), "\(result.stderr)")
            let clear = try #require(result.stderr.range(of: "database clear; going on"), "\(result.stderr)")
            let copied = try #require(result.stderr.range(of: "rehearse phase=copy "), "\(result.stderr)")
            #expect(paused.lowerBound < clear.lowerBound && clear.lowerBound < copied.lowerBound, "\(result.stderr)")
            #expect(result.stderr.contains("throttled: active backends"), "\(result.stderr)")
        }
    }

    /// The schema shapes Baton supports: the plain users table (`sample-config/baton.json`) and each framework's
    /// sample configuration (Nhost's tables carry triggers calling hasura-auth's own function, which the copy brings).
    static let shapes = ["baton", "allauth", "authjs", "better-auth", "supabase", "omniauth", "hanko", "nhost", "keycloak", "authentik", "gitea", "kratos", "supertokens"]

    @Test("every supported schema shape, with its sample configuration: every Apple row migrates by sign-in or exchange",
          arguments: shapes)
    func schemaShape(_ name: String) async throws {
        try await withDatabase("rehearse") { source in
            let users = 20
            var sql: String
            let legacy: [String: Any]
            var missingIndex = false
            if name == "baton" {
                sql = "CREATE TABLE public.users (id bigint PRIMARY KEY, apple_sub text UNIQUE, email text UNIQUE, name text);\n"
                for i in 1...users { sql += "INSERT INTO public.users VALUES (\(i), '\(Self.sub(i))', 'a\(i)@privaterelay.appleid.com', 'n\(i)');\n" }
                let path = packageRoot.appendingPathComponent("sample-config/baton.json").path
                let tree = try #require(try JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: path))) as? [String: Any])
                legacy = try #require(tree["legacy"] as? [String: Any]).filter { !($0.value is NSNull) }
            } else {
                let framework = try #require([Framework.allauth, .authjs, .betterAuth, .supabase, .omniauth, .hanko, .nhost, .keycloak, .authentik, .gitea, .kratos, .supertokens].first { $0.name == name })
                sql = framework.ddl
                for i in 1...users { sql += framework.addApple(i, Self.sub(i), "a\(i)@privaterelay.appleid.com") + ";\n" }
                for i in 1...3 { sql += framework.addOther(100 + i, "10987654321\(i)", "g\(i)@gmail.com") + ";\n" }
                legacy = framework.legacy
                missingIndex = !framework.hasSubjectIndex
            }
            let script = sql
            _ = try await offPool { try TestDatabase.psql(source, script) }
            let config = try Self.configuration(legacy)
            let before = try await offPool { try Self.digest(source) }
            let (result, output) = try await rehearse(config, source)
            #expect(try await offPool { try Self.digest(source) } == before)
            let out = try #require(output, "\(result.stdout)\(result.stderr)")
            #expect(out.selected == users)
            #expect(out.by_signin + out.by_exchange == users, "\(result.stdout)\(result.stderr)")
            #expect(out.by_signin == 6)
            if missingIndex {
                // better-auth ships no unique index over (providerId, accountId): the only problem, with the statement.
                #expect(result.status == 1 && out.problems.map(\.kind) == ["missing_unique"], "\(result.stdout)")
                #expect(out.problems.first?.examples.first?.hasPrefix("CREATE UNIQUE INDEX") == true, "\(out.problems)")
            } else {
                #expect(result.status == 0 && out.problems.isEmpty, "\(result.stdout)\(result.stderr)")
            }
        }
    }

    @Test("the recipient's copy between companies: rows holding only a transfer identifier are imported, seeded as team A's transferred users, signed in and exchanged")
    func crossCompany() async throws {
        try await withDatabase("rehearse") { source in
            // 16 rows from the sender's export (own keys, a transfer identifier, no subject, no email), 4 of the
            // recipient's own Apple users with a subject.
            var sql = """
                CREATE TABLE public."user" ("id" text PRIMARY KEY, "appleSub" text UNIQUE, "email" text UNIQUE, "transferSub" text UNIQUE, "name" text);

                """
            for i in 1...16 { sql += "INSERT INTO public.\"user\" (\"id\", \"transferSub\", \"name\") VALUES ('acct-\(i)', '\(Self.sub(5_000 + i))', 'N\(i)');\n" }
            for i in 17...20 { sql += "INSERT INTO public.\"user\" (\"id\", \"appleSub\", \"email\") VALUES ('acct-\(i)', '\(Self.sub(i))', 'u\(i)@example.com');\n" }
            let script = sql
            _ = try await offPool { try TestDatabase.psql(source, script) }
            let config = try Self.configuration(["table": "public.user", "key_column": "id", "subject_column": "appleSub", "email_column": "email",
                                                 "transfer_column": "transferSub", "email_policy": "always"])
            let before = try await offPool { try Self.digest(source) }
            let (clean, output) = try await rehearse(config, source)
            #expect(clean.status == 0, "\(clean.stdout)\(clean.stderr)")
            #expect(try await offPool { try Self.digest(source) } == before)
            let out = try #require(output)
            #expect(out.selected == 20 && out.problems.isEmpty, "\(out.problems)")
            #expect(out.by_signin + out.by_exchange == 20 && out.by_signin == 6, "\(clean.stdout)")

            // A row with neither subject nor transfer identifier, and one whose key `baton import transfers` refuses.
            _ = try await offPool {
                try TestDatabase.psql(source, """
                    INSERT INTO public."user" ("id", "transferSub") VALUES ('acct 21', '\(Self.sub(5_021))');
                    INSERT INTO public."user" ("id") VALUES ('acct-22');
                    """)
            }
            let (found, problemOutput) = try await rehearse(config, source)
            #expect(found.status == 1, "\(found.stdout)\(found.stderr)")
            let problems = Dictionary(uniqueKeysWithValues: try #require(problemOutput).problems.map { ($0.kind, $0) })
            #expect(problems["subject_null"]?.examples == ["acct-22"], "\(problems)")
            #expect(problems["transfer_rejected"]?.count == 1 && problems["transfer_rejected"]?.examples == ["acct 21"], "\(problems)")
            #expect(problemOutput?.selected == 22)
            #expect(problemOutput.map { $0.by_signin + $0.by_exchange } == 20)
        }
    }

    @Test("configuration errors exit 2: a table the source lacks, a bad identifier, no --from")
    func configurationErrors() async throws {
        try await withDatabase("rehearse") { source in
            _ = try await offPool { try TestDatabase.psql(source, "CREATE TABLE users (id bigint PRIMARY KEY, apple_sub text UNIQUE)") }
            let missing = try Self.configuration(["table": "public.accounts", "key_column": "id", "subject_column": "apple_sub"])
            let (absent, _) = try await rehearse(missing, source)
            #expect(absent.status == 2 && absent.stderr.contains("public.accounts"), "\(absent.stderr)")
            let badColumn = try Self.configuration(["table": "public.users", "key_column": "id", "subject_column": "sub"])
            let (noColumn, _) = try await rehearse(badColumn, source)
            #expect(noColumn.status == 2 && noColumn.stderr.contains("sub"), "\(noColumn.stderr)")
            let bad = try Self.configuration(["table": "public.users; DROP", "key_column": "id", "subject_column": "apple_sub"])
            #expect(try await rehearse(bad, source).0.status == 2)
            #expect(try await runBatonOffPool(["rehearse", "--config", bad]).status == 2)
        }
    }
}
