import Foundation
import TestSupport
import Testing

@Suite("baton demo")
struct DemoCommandTests {
    /// The figures of the demo's closing line: `every user accounted for: A by sign-in + B by exchange + C unresolved = D of E users`.
    struct Account: Equatable {
        var signIn: Int
        var exchange: Int
        var unresolved: Int
        var sum: Int
        var total: Int

        init(signIn: Int, exchange: Int, unresolved: Int, sum: Int, total: Int) {
            (self.signIn, self.exchange, self.unresolved, self.sum, self.total) = (signIn, exchange, unresolved, sum, total)
        }

        init?(_ stdout: String) {
            guard let line = stdout.split(separator: "\n").first(where: { $0.contains("every user accounted for:") }) else { return nil }
            let numbers = line.split(whereSeparator: { !$0.isNumber && $0 != "," })
                .map { $0.replacingOccurrences(of: ",", with: "") }
                .compactMap { Int($0) }
            guard numbers.count == 5 else { return nil }
            (signIn, exchange, unresolved, sum, total) = (numbers[0], numbers[1], numbers[2], numbers[3], numbers[4])
        }
    }

    @Test("tells the whole story with 300 users, accounts for every one, and writes the report page")
    func story() async throws {
        let databaseURL = try TestDatabase.create("demo")
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("demo-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let reportPath = directory.appendingPathComponent("report.html").path

        let result = try await runBatonOffPool(["demo", "--database-url", databaseURL, "--users", "300", "--concurrency", "8",
                                                "--out", reportPath, "--keep-data"])
        #expect(result.status == 0, "\(result.stdout)\n\(result.stderr)")

        // Every step, in order, with its figures.
        var position = result.stdout.startIndex
        for step in 1...10 {
            let marker = "[\(step)/10]"
            let found = try #require(result.stdout.range(of: marker, range: position..<result.stdout.endIndex), "missing \(marker)")
            position = found.upperBound
        }
        #expect(result.stdout.contains("300 rows inserted with one INSERT"))
        #expect(result.stdout.contains("300 transfer identifiers made"))
        #expect(result.stdout.contains("100 iPhones open the app at once"))
        #expect(result.stdout.contains("GET /v1/credential-state?user=OLD_SUB → transferred 100"))
        #expect(result.stdout.contains("100 identity tokens, 100 with transfer_sub"))
        #expect(result.stdout.contains("POST /v1/signin with the new token → migrated 100"))
        #expect(result.stdout.contains("197 exchanged and rewritten"))
        #expect(result.stdout.contains("the demo stops the job with 3 users to go"))
        #expect(result.stdout.contains("GET /v1/report (admin token) → 297 of 300 migrated, 3 pending"))
        #expect(result.stdout.contains("Apple answers invalid_request 3"))
        #expect(result.stdout.contains("Baton marks them unresolvable (3)"))
        #expect(result.stdout.contains("Where to look next:"))

        // Every user accounted for, in the story and in the database.
        let account = try #require(Account(result.stdout))
        #expect(account == Account(signIn: 100, exchange: 197, unresolved: 3, sum: 300, total: 300))
        let counts = try TestDatabase.psql(databaseURL, """
            SELECT (SELECT count(*) FROM public.users) || ',' ||
                   count(*) FILTER (WHERE state = 'migrated' AND method = 'signin') || ',' ||
                   count(*) FILTER (WHERE state = 'migrated' AND method = 'exchange') || ',' ||
                   count(*) FILTER (WHERE state = 'unresolvable' AND last_error = 'invalid_request') || ',' ||
                   (SELECT count(*) FROM public.users u JOIN baton.transfers t ON t.new_sub = u.apple_sub) || ',' ||
                   (SELECT count(*) FROM baton.events WHERE kind = 'migrated')
            FROM baton.transfers
            """)
        #expect(counts == "300,100,197,3,297,297")

        // The page: self-contained, carrying the figures.
        let page = try String(contentsOfFile: reportPath, encoding: .utf8)
        #expect(page.hasPrefix("<!DOCTYPE html>"))
        #expect(page.contains("</html>"))
        #expect(!page.contains("<script src") && !page.contains("http://") && !page.contains("https://cdn"))
        #expect(page.contains("297"))

        // No secret or token in the output.
        for secret in ["PRIVATE KEY", "eyJ", "access_token", "client_secret="] {
            #expect(!result.stdout.contains(secret) && !result.stderr.contains(secret), "output contains \(secret)")
        }
    }

    @Test("--late-start: the service starts an hour after acceptance; the second accounts made meanwhile are found and merged")
    func lateStart() async throws {
        let databaseURL = try TestDatabase.create("demo_late")
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("demo-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let result = try await runBatonOffPool(["demo", "--database-url", databaseURL, "--users", "60", "--concurrency", "4", "--stragglers", "0",
                                                "--late-start", "--out", directory.appendingPathComponent("r.html").path])
        #expect(result.status == 0, "\(result.stdout)\n\(result.stderr)")
        #expect(result.stdout.contains("meanwhile 3 users signed in at the login endpoint without it"), "\(result.stdout)")
        #expect(result.stdout.contains("3 of the 3 second accounts met by the exchange"), "\(result.stdout)")
        #expect(result.stdout.contains("Duplicates (3; 0 waiting for baton merge)"))
        // The second accounts are not users: 20 sign in on a device, 40 are exchanged (3 of them merged).
        #expect(Account(result.stdout) == Account(signIn: 20, exchange: 40, unresolved: 0, sum: 60, total: 60))
    }

    @Test("25 stragglers, more than the job's 10 identical refusals: the late exchange marks every one unresolvable (issue 40)")
    func manyStragglers() async throws {
        let databaseURL = try TestDatabase.create("demo_stragglers")
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("demo-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let result = try await runBatonOffPool(["demo", "--database-url", databaseURL, "--users", "60", "--concurrency", "8", "--stragglers", "25",
                                                "--out", directory.appendingPathComponent("r.html").path])
        #expect(result.status == 0, "\(result.stdout)\n\(result.stderr)")
        #expect(result.stdout.contains("Apple answers invalid_request 25"), "\(result.stdout)")
        #expect(result.stdout.contains("Baton marks them unresolvable (25)"), "\(result.stdout)")
        #expect(Account(result.stdout) == Account(signIn: 20, exchange: 15, unresolved: 25, sum: 60, total: 60))
    }

    @Test("drops its tables afterwards unless asked to keep them; with no stragglers nobody is left")
    func cleansUp() async throws {
        let databaseURL = try TestDatabase.create("demo_clean")
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("demo-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let result = try await runBatonOffPool(["demo", "--database-url", databaseURL, "--users", "30", "--concurrency", "4", "--stragglers", "0",
                                                "--out", directory.appendingPathComponent("r.html").path])
        #expect(result.status == 0, "\(result.stdout)\n\(result.stderr)")
        #expect(Account(result.stdout) == Account(signIn: 10, exchange: 20, unresolved: 0, sum: 30, total: 30))
        #expect(result.stdout.contains("no stragglers"))
        #expect(result.stdout.contains("dropped public.users and schema baton"))
        let left = try TestDatabase.psql(databaseURL, "SELECT to_regclass('public.users') IS NULL AND NOT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = 'baton')")
        #expect(left == "t")
    }

    @Test("Ctrl-C stops the demo with exit 130 and one line saying what stops with it")
    func interrupt() async throws {
        let databaseURL = try TestDatabase.create("demo_interrupt")
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("demo-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let process = try runProcessAsync(batonBinaryPath, ["demo", "--database-url", databaseURL, "--users", "20000", "--concurrency", "4", "--rate", "50",
                                                            "--out", directory.appendingPathComponent("r.html").path])
        // Past step 1 (Baton's schema exists), the demo is running its scenario.
        let started = await offPool { () -> Bool in
            for _ in 0..<600 {
                if (try? TestDatabase.psql(databaseURL, "SELECT count(*) FROM pg_namespace WHERE nspname = 'baton'")) == "1" { return true }
                usleep(100_000)
            }
            return false
        }
        #expect(started)
        process.signal(SIGINT)
        let result = try await offPool { try process.wait(timeout: 60) }
        #expect(result.status == 130)
        #expect(result.stderr.contains("interrupted"))
        #expect(!result.stderr.contains("crashed"))
        #expect(!FileManager.default.fileExists(atPath: directory.appendingPathComponent("r.html").path))
    }

    @Test("refuses a database that already has public.users, and leaves it untouched")
    func refusesNonEmptyDatabase() async throws {
        let databaseURL = try TestDatabase.create("demo_busy")
        _ = try TestDatabase.psql(databaseURL, "CREATE TABLE public.users (id int PRIMARY KEY); INSERT INTO public.users VALUES (1)")
        let result = try await runBatonOffPool(["demo", "--database-url", databaseURL, "--users", "30"])
        #expect(result.status == 2)
        #expect(result.stderr.contains("needs an empty one"))
        #expect(try TestDatabase.psql(databaseURL, "SELECT count(*) FROM public.users") == "1")
        #expect(try TestDatabase.psql(databaseURL, "SELECT count(*) FROM pg_namespace WHERE nspname = 'baton'") == "0")
    }

    @Test("usage errors exit 2 with one line", arguments: [
        ["demo"],
        ["demo", "--database-url", "postgresql:///x", "--users", "5"],
        ["demo", "--database-url", "postgresql:///x", "--concurrency", "0"],
        ["demo", "--database-url", "postgresql:///x", "--rate", "fast"],
        ["demo", "--database-url", "postgresql:///x", "--stragglers", "-1"],
        ["demo", "--database-url", "postgresql:///x", "extra"],
        ["demo", "--database-url", "postgresql:///x", "--unknown"],
        ["demo", "--database-url", "postgresql:///x", "--late-start", "--schema", "allauth"],
    ])
    func usageErrors(arguments: [String]) async throws {
        let result = try await runBatonOffPool(arguments, environment: ["BATON_DATABASE_URL": ""])
        #expect(result.status == 2)
        #expect(result.stderr.split(separator: "\n").count == 1)
    }
}
