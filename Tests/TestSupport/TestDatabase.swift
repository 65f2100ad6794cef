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

    /// Creates a fresh, empty database named after `prefix` and returns its URL.
    ///
    /// The URL is the server's with libpq's `dbname` parameter added, so any shape of server URL works
    /// (path or none, query or none, key/value form); the new URL is checked to reach the new database, so a
    /// test never shares one by mistake.
    public static func create(_ prefix: String = "test") throws -> String {
        try create(prefix, on: serverURL())
    }

    /// Creates a fresh, empty database named after `prefix` on the server at `server` and returns its URL.
    public static func create(_ prefix: String, on server: String) throws -> String {
        let name = "\(prefix.lowercased().filter { $0.isLetter || $0.isNumber || $0 == "_" })_\(UUID().uuidString.prefix(8).lowercased())"
        _ = try psql(server, "CREATE DATABASE \(name)")
        let url = url(server, database: name)
        let reached = try psql(url, "SELECT current_database()")
        guard reached == name else { throw TestSupportError("the URL for database \(name) reaches \(reached)") }
        return url
    }

    /// `server` with its database set to `name` through libpq's `dbname` parameter, which overrides a
    /// database named in a URL's path (URI form) or earlier in the string (key/value form).
    /// `name` must need no quoting or percent-encoding (letters, digits, `_`).
    public static func url(_ server: String, database name: String) -> String {
        guard server.contains("://") else { return "\(server) dbname=\(name)" }
        let separator = !server.contains("?") ? "?" : server.hasSuffix("?") || server.hasSuffix("&") ? "" : "&"
        return "\(server)\(separator)dbname=\(name)"
    }

    /// Drops the database `url` names (from its server's `postgres` database), closing any connection still
    /// open to it.
    public static func drop(_ url: String) throws {
        let name = try psql(url, "SELECT current_database()")
        _ = try psql(self.url(url, database: "postgres"), "DROP DATABASE \(name) WITH (FORCE)")
    }

    /// Creates the application's table `public.users` (`id bigserial`, `apple_sub text UNIQUE`, `email text`,
    /// `transfer_sub text`) with a row per subject and email, through `psql`.
    /// Subjects and emails are test data: no double quotes or backslashes.
    public static func createUsersTable(_ url: String, subjects: [String], emails: [String]) throws {
        _ = try psql(url, """
            CREATE TABLE public.users (id bigserial PRIMARY KEY, apple_sub text UNIQUE, email text, transfer_sub text);
            INSERT INTO public.users (apple_sub, email) SELECT * FROM unnest('\(arrayLiteral(subjects))'::text[], '\(arrayLiteral(emails))'::text[]);
            """)
    }

    /// Records pending transfers (sending-team identifier → transfer identifier) in `baton.transfers`.
    public static func addTransfers(_ url: String, _ transfers: [String: String]) throws {
        let pairs = Array(transfers)
        _ = try psql(url, """
            INSERT INTO baton.transfers (old_sub, transfer_sub)
            SELECT * FROM unnest('\(arrayLiteral(pairs.map(\.key)))'::text[], '\(arrayLiteral(pairs.map(\.value)))'::text[]);
            """)
    }

    private static func arrayLiteral(_ values: [String]) -> String {
        "{" + values.map { "\"\($0)\"" }.joined(separator: ",") + "}"
    }

    /// Runs SQL through `psql` (independently of the code under test) and returns its unaligned output.
    public static func psql(_ url: String, _ sql: String) throws -> String {
        let result = try runProcess("/usr/bin/psql", [url, "-v", "ON_ERROR_STOP=1", "-qAtc", sql])
        guard result.status == 0 else { throw TestSupportError("psql failed: \(result.stderr)") }
        return result.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
    }
}

/// A PostgreSQL cluster of a test's own, for outage tests: stopping the shared cluster would break
/// every other test running at the same time.
public final class PrivateCluster: @unchecked Sendable {
    // `@unchecked Sendable`: immutable after init; the server itself is driven through scripts/pg.sh.
    /// The cluster's directory (data, socket, log).
    public let directory: String
    /// URL of its `postgres` database.
    public let url: String

    /// Starts a new cluster in a fresh temporary directory. Requires the environment `make test` sets up.
    public init() throws {
        _ = try TestDatabase.serverURL()  // fail loudly outside `make test`
        // A short path: the socket's full path must fit in 107 bytes.
        let made = try runProcess("/usr/bin/mktemp", ["-d", "/tmp/baton-pgp.XXXXXX"])
        directory = made.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        let result = try PrivateCluster.pg(["start", directory])
        url = result.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    /// Stops the server; the data stays for ``restart()``.
    public func stop() throws { _ = try PrivateCluster.pg(["stop", directory]) }

    /// Starts the server again on the same socket.
    public func restart() throws { _ = try PrivateCluster.pg(["restart", directory]) }

    /// Stops the server and deletes its directory.
    public func destroy() throws { _ = try PrivateCluster.pg(["destroy", directory]) }

    deinit { _ = try? PrivateCluster.pg(["destroy", directory]) }

    private static func pg(_ arguments: [String]) throws -> String {
        let result = try runProcess(packageRoot.appendingPathComponent("scripts/pg.sh").path, arguments)
        guard result.status == 0 else { throw TestSupportError("pg.sh \(arguments[0]) failed: \(result.stderr)") }
        return result.stdout
    }
}
