import Foundation

/// The throwaway PostgreSQL that `make test` starts (`scripts/pg.sh run`).
///
/// Tests that need PostgreSQL call ``TestDatabase/create(_:)``, which fails loudly, never skips,
/// when `BATON_TEST_DATABASE_URL` is not set.
public enum TestDatabase {
    /// URL of the cluster's maintenance database, from `BATON_TEST_DATABASE_URL`.
    public static func serverURL() throws -> String {
        guard let url = ProcessInfo.processInfo.environment["BATON_TEST_DATABASE_URL"], !url.isEmpty else {
            throw TestSupportError("BATON_TEST_DATABASE_URL is not set: run the tests with 'make test' (or 'scripts/pg.sh run swift test')")
        }
        return url
    }

    /// The cluster's directory (for stopping and restarting it in fault tests), from `BATON_TEST_PG_DIR`.
    public static func clusterDirectory() throws -> String {
        guard let dir = ProcessInfo.processInfo.environment["BATON_TEST_PG_DIR"], !dir.isEmpty else {
            throw TestSupportError("BATON_TEST_PG_DIR is not set: run the tests with 'make test'")
        }
        return dir
    }

    /// Creates a fresh, empty database named after `prefix` and returns its URL.
    public static func create(_ prefix: String = "test") throws -> String {
        let server = try serverURL()
        let name = "\(prefix.lowercased().filter { $0.isLetter || $0.isNumber || $0 == "_" })_\(UUID().uuidString.prefix(8).lowercased())"
        let result = try runProcess("/usr/bin/psql", [server, "-v", "ON_ERROR_STOP=1", "-qc", "CREATE DATABASE \(name)"])
        guard result.status == 0 else { throw TestSupportError("CREATE DATABASE failed: \(result.stderr)") }
        return server.replacingOccurrences(of: "postgresql://postgres@/postgres?", with: "postgresql://postgres@/\(name)?")
    }

    /// Runs SQL through `psql` (independently of the code under test) and returns its unaligned output.
    public static func psql(_ url: String, _ sql: String) throws -> String {
        let result = try runProcess("/usr/bin/psql", [url, "-v", "ON_ERROR_STOP=1", "-qAtc", sql])
        guard result.status == 0 else { throw TestSupportError("psql failed: \(result.stderr)") }
        return result.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    /// Stops the test cluster (for outage tests); ``restart()`` brings it back.
    public static func stopServer() throws {
        let result = try runProcess(packageRoot.appendingPathComponent("scripts/pg.sh").path, ["stop", try clusterDirectory()])
        guard result.status == 0 else { throw TestSupportError("pg.sh stop failed: \(result.stderr)") }
    }

    /// Starts the test cluster again after ``stopServer()``.
    public static func restartServer() throws {
        let result = try runProcess(packageRoot.appendingPathComponent("scripts/pg.sh").path, ["restart", try clusterDirectory()])
        guard result.status == 0 else { throw TestSupportError("pg.sh restart failed: \(result.stderr)") }
    }
}
