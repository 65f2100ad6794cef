import Foundation
import TestSupport
import Testing

@Suite("baton command line basics")
struct BasicCommandTests {
    @Test("--help lists the commands and exits 0")
    func help() throws {
        let result = try runBaton(["--help"])
        #expect(result.status == 0)
        #expect(result.stdout.contains("usage: baton <command>"))
        #expect(result.stdout.contains("db "))
    }

    @Test("an unknown command exits 2 with one line and a hint")
    func unknownCommand() throws {
        let result = try runBaton(["frobnicate"])
        #expect(result.status == 2)
        let lines = result.stderr.split(separator: "\n")
        #expect(lines.count == 1)
        #expect(result.stderr.contains("unknown command 'frobnicate'"))
        #expect(result.stderr.contains("baton --help"))
    }

    @Test("an unknown option exits 2 with a hint")
    func unknownOption() throws {
        let result = try runBaton(["db", "migrate", "--no-such-option"])
        #expect(result.status == 2)
        #expect(result.stderr.contains("unknown option --no-such-option"))
        #expect(result.stderr.contains("--help"))
    }
}

@Suite("baton db migrate")
struct DbMigrateCommandTests {
    @Test("twice, then twice at once: one set of tables, one record per version")
    func migrateIsIdempotentAndSerialized() throws {
        let url = try TestDatabase.create("migrate")
        let first = try runBaton(["db", "migrate", "--database-url", url])
        #expect(first.status == 0, "\(first.stderr)")
        #expect(first.stdout.contains("applied 0001_"))
        let second = try runBaton(["db", "migrate", "--database-url", url])
        #expect(second.status == 0)
        #expect(second.stdout.contains("up to date"))

        let concurrentURL = try TestDatabase.create("migrate_concurrent")
        let results = try [0, 1, 2].map { _ in
            try runProcessAsync(batonBinaryPath, ["db", "migrate", "--database-url", concurrentURL])
        }.map { try $0.wait() }
        #expect(results.allSatisfy { $0.status == 0 })
        for databaseURL in [url, concurrentURL] {
            let versions = try TestDatabase.psql(databaseURL, "SELECT count(*), count(DISTINCT version) FROM baton.schema_migrations")
            let files = try FileManager.default.contentsOfDirectory(atPath: packageRoot.appendingPathComponent("schema").path)
                .filter { $0.hasSuffix(".sql") }.count
            #expect(versions == "\(files)|\(files)")
            #expect(try TestDatabase.psql(databaseURL, "SELECT count(*) FROM pg_tables WHERE schemaname = 'baton' AND tablename = 'transfers'") == "1")
        }
        let status = try runBaton(["db", "status", "--database-url", url])
        #expect(status.status == 0)
        #expect(status.stdout.contains("applied  0001_"))
        #expect(!status.stdout.contains("pending"))
    }

    @Test("no database is a usage error")
    func noDatabase() throws {
        let result = try runBaton(["db", "migrate"], environment: ["BATON_DATABASE_URL": ""])
        #expect(result.status == 2)
        #expect(result.stderr.contains("--database-url"))
    }

    @Test("an unreachable database fails with exit 1 and a clear line")
    func unreachable() throws {
        let result = try runBaton(["db", "migrate", "--database-url", "postgresql://postgres@/postgres?host=/nonexistent-baton&port=1"])
        #expect(result.status == 1)
        #expect(result.stderr.contains("connection_failure"))
    }

    /// Every command's options, as the command line accepts them: `--help` is generated from each command's
    /// declaration, so this table is the contract the declarations must keep.
    static let options: [([String], [String])] = [
        (["verify"], ["client-id", "jwks", "jwks-url", "nonce", "nonce-flow", "now"]),
        (["client-secret"], ["team-id", "key-id", "key", "client-id", "days"]),
        (["db", "migrate"], ["database-url"]),
        (["db", "status"], ["database-url"]),
        (["doctor"], ["config"]),
        (["emulator"], ["host", "port", "state", "log-level"]),
        (["serve"], ["config", "port", "log-level"]),
        (["import", "transfers"], ["dry-run", "config", "database-url", "max-replica-lag", "max-active-backends"]),
        (["merge"], ["dry-run", "yes", "config", "max-replica-lag", "max-active-backends"]),
        (["transfer-ids"], ["target", "yes", "workers", "rate", "dry-run", "config", "lease", "max-failures", "retry-failed"]),
        (["exchange"], ["workers", "rate", "dry-run", "config", "lease", "max-failures", "retry-failed"]),
        (["report"], ["format", "out", "config", "limit", "unmasked", "now", "accepted-at"]),
        (["demo"], ["database-url", "users", "concurrency", "rate", "stragglers", "out", "keep-data"]),
    ]

    /// The same contract for the workbench, `baton-bench`.
    static let workbenchOptions: [([String], [String])] = [
        (["verify"], ["seconds"]),
        (["emulator"], ["concurrency", "requests", "tokens", "exchanges"]),
        (["signin"], ["database-url", "users", "transfers", "migrations", "wrk-migrations", "current-requests", "concurrency", "pgbench-seconds", "pool-size",
                      "schema", "wrk-seconds", "perf", "log-level", "nonce", "baton"]),
        (["exchange"], ["database-url", "users", "backlog", "limit", "latency-ms", "workers", "sequential-seconds"]),
        (["fuzz", "http"], ["url", "requests", "seed", "concurrency", "paths", "probe", "pid", "max-rss-growth-mb", "seconds"]),
    ]

    @Test("each command's --help lists every option it accepts, and exits 0", arguments: options)
    func commandHelp(command: [String], options: [String]) throws {
        try expectHelp(of: "baton", command, lists: options, run: runBaton(command + ["--help"]))
    }

    @Test("each baton-bench command's --help lists every option it accepts, and exits 0", arguments: workbenchOptions)
    func workbenchHelp(command: [String], options: [String]) throws {
        try expectHelp(of: "baton-bench", command, lists: options, run: runBatonBench(command + ["--help"]))
    }

    private func expectHelp(of program: String, _ command: [String], lists options: [String], run result: ProcessResult) {
        let words = ([program] + command).joined(separator: " ")
        #expect(result.status == 0)
        #expect(result.stdout.hasPrefix("usage: \(words)"))
        for option in options {
            #expect(result.stdout.contains("  --\(option)"), "--\(option) missing from '\(words) --help'")
        }
    }

    @Test("baton-bench --help lists the benchmarks under 'benchmarks:', one per line, as scripts/bench.sh reads them")
    func benchList() throws {
        let lines = try runBatonBench(["--help"]).stdout.split(separator: "\n", omittingEmptySubsequences: false)
        let start = try #require(lines.firstIndex(of: "benchmarks:"))
        let names = lines[(start + 1)...].prefix { !$0.isEmpty }.map { $0.split(separator: " ")[0] }
        #expect(names == ["verify", "emulator", "signin", "exchange"])
    }

    @Test("the benchmarks and the fuzzer are not baton's: it lists neither, and names baton-bench for them (exit 2)")
    func workbenchApart() throws {
        let help = try runBaton(["--help"]).stdout
        #expect(!help.contains("\n  bench ") && !help.contains("\n  fuzz "))
        for (arguments, hint) in [(["bench", "signin", "--users", "1000"], "run 'baton-bench signin --users 1000'"), (["fuzz", "http"], "run 'baton-bench fuzz http'"),
                                  (["bench"], "run 'baton-bench --help'")] {
            let result = try runBaton(arguments)
            #expect(result.status == 2)
            #expect(result.stderr.split(separator: "\n").count == 1)
            #expect(result.stderr.contains(hint), "\(result.stderr)")
        }
    }

    @Test("commands with subcommands name them when none or an unknown one is given")
    func subcommandExpected() throws {
        for (arguments, expected) in [(["db"], "expected 'migrate' or 'status'"), (["db", "nope"], "unknown db command 'nope'")] {
            let result = try runBaton(arguments)
            #expect(result.status == 2)
            #expect(result.stderr.contains(expected))
        }
        let workbench = try runBatonBench(["fuzz"])
        #expect(workbench.status == 2)
        #expect(workbench.stderr == "baton-bench fuzz: expected 'http'; run 'baton-bench fuzz --help' for usage\n")
        let unknown = try runBatonBench(["signup"])
        #expect(unknown.status == 2)
        #expect(unknown.stderr.contains("baton-bench: unknown command 'signup'"))
    }

    @Test("values are checked against the declaration: a number out of range or a word not among the choices exits 2")
    func declaredValues() throws {
        for (arguments, expected) in [
            (["exchange", "--workers", "0"], "--workers must be a whole number from 1 to 256"),
            (["serve", "--log-level", "loud"], "--log-level must be trace, debug, info, notice, warning or error"),
            (["report", "--format", "xml"], "--format must be table, csv, json or html"),
            (["exchange", "--dry-run=yes"], "--dry-run takes no value"),
            (["exchange", "--rate"], "--rate needs a value"),
        ] {
            let result = try runBaton(arguments)
            #expect(result.status == 2)
            #expect(result.stderr.contains(expected))
        }
    }
}
