import Foundation
import TestSupport
import Testing

/// `baton rehearse --from URL` with secrets in the URL: pg_dump, which any user of the machine can see in `ps`,
/// gets them through a service file, never on its command line or in its environment.
@Suite("Rehearse: the source's secrets stay off pg_dump's command line")
struct RehearseCredentialsTests {
    @Test("pg_dump's argv and environment carry neither password nor sslpassword, and the rehearsal runs")
    func secretsOffTheCommandLine() async throws {
        try await withDatabase("rehearse_secret") { source in
            var sql = "CREATE TABLE users (id bigint PRIMARY KEY, apple_sub text UNIQUE, email text);\n"
            for i in 1...4 { sql += "INSERT INTO users VALUES (\(i), '\(RehearseCommandTests.sub(i))', 'u\(i)@example.com');\n" }
            _ = try TestDatabase.psql(source, sql)
            let config = try RehearseCommandTests.configuration(["table": "public.users", "key_column": "id", "subject_column": "apple_sub",
                                                                 "email_column": "email"])
            // The test server trusts every local connection: the secrets are carried, never checked.
            let withSecrets = source + "&password=pw-s3cret&sslpassword=key-s3cret"

            // pg_dump waits for a lock this session holds, so it can be looked at while it runs.
            let locker = try runProcessAsync("/usr/bin/psql", ["-X", "-q", "--dbname=\(source)", "-c",
                                                               "BEGIN; LOCK TABLE users IN ACCESS EXCLUSIVE MODE; SELECT pg_sleep(120)"])
            let lockedQuery = "SELECT count(*) FROM pg_locks l JOIN pg_class c ON c.oid = l.relation WHERE c.relname = 'users' AND l.mode = 'AccessExclusiveLock' AND l.granted"
            var locked = false
            for _ in 0..<200 where !locked {
                locked = try TestDatabase.psql(source, lockedQuery) == "1"
                if !locked { try await Task.sleep(for: .milliseconds(25)) }
            }
            #expect(locked)
            let json = (config as NSString).deletingLastPathComponent + "/out.json"
            let rehearsal = try runProcessAsync(batonBinaryPath, ["rehearse", "--config", config, "--from", withSecrets, "--json", json])
            var dump: (argv: String, environment: String)?
            for _ in 0..<400 where dump == nil {
                dump = pgDumpProcess()
                if dump == nil { try await Task.sleep(for: .milliseconds(25)) }
            }
            _ = try TestDatabase.psql(source, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query LIKE '%pg_sleep(120)%' AND pid <> pg_backend_pid()")
            _ = try await offPool { try locker.wait(timeout: 30) }
            let result = try await offPool { try rehearsal.wait(timeout: 300) }

            let seen = try #require(dump, "pg_dump was not found running")
            #expect(seen.argv.contains("--dbname="), "\(seen.argv)")
            #expect(!seen.argv.contains("s3cret"), "\(seen.argv)")
            #expect(!seen.environment.contains("s3cret"))
            #expect(seen.environment.contains("PGSERVICEFILE="))
            #expect(result.status == 0, "\(result.stdout)\(result.stderr)")
            #expect(!result.stderr.contains("s3cret") && !result.stdout.contains("s3cret"))
        }
    }

    /// The argv (NULs as spaces) and environment of a running `pg_dump`, from `/proc`.
    private func pgDumpProcess() -> (argv: String, environment: String)? {
        for entry in (try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? [] where Int(entry) != nil {
            guard let argv = FileManager.default.contents(atPath: "/proc/\(entry)/cmdline"), !argv.isEmpty else { continue }
            let arguments = argv.split(separator: 0).map { String(decoding: $0, as: UTF8.self) }
            guard arguments.first?.hasSuffix("/pg_dump") == true, arguments.contains(where: { $0.contains("rehearse_secret") }) else { continue }
            let environment = FileManager.default.contents(atPath: "/proc/\(entry)/environ") ?? Data()
            return (arguments.joined(separator: " "), String(decoding: environment.map { $0 == 0 ? 10 : $0 }, as: UTF8.self))
        }
        return nil
    }
}
