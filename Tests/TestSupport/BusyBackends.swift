import Foundation

/// Client backends kept busy on a database, each a `psql` running `pg_sleep` under the application name
/// `baton_busy`, until ``end()`` cancels them: the load the bulk jobs' `--max-active-backends` yields to.
public struct BusyBackends: Sendable {
    private let url: String
    private let sessions: [RunningProcess]

    /// Starts `count` sessions on `url` and returns once PostgreSQL shows every one of them active.
    public init(_ count: Int, on url: String) async throws {
        self.url = url
        sessions = try (0..<count).map { _ in
            try runProcessAsync("/usr/bin/psql", [url, "-qAtc", "SELECT pg_sleep(600)"], environment: ["PGAPPNAME": "baton_busy"])
        }
        for _ in 0..<200 {
            if try await Self.active(url) == count { return }
            try await Task.sleep(for: .milliseconds(50))
        }
        throw TestSupportError("the busy sessions never all became active")
    }

    /// How many busy sessions PostgreSQL shows active on `url`'s server.
    public static func active(_ url: String) async throws -> Int {
        let text = try await offPool { try TestDatabase.psql(url, "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'baton_busy' AND state = 'active'") }
        return Int(text) ?? -1
    }

    /// Cancels the sleeps and waits for the sessions to end.
    public func end() async throws {
        let url = self.url
        _ = try await offPool { try TestDatabase.psql(url, "SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE application_name = 'baton_busy'") }
        for session in sessions { _ = try await offPool { try session.wait(timeout: 60) } }
    }
}
