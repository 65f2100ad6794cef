import Foundation
import TestSupport
import Testing

/// The per-suite database helper: whatever the shape of the server's URL, a new database's URL reaches that
/// database and no other, so tests never share one by mistake.
@Suite("Test databases")
struct TestDatabaseTests {
    /// The shared cluster's URL in other shapes libpq accepts: no database in the path, the host in the
    /// authority as well as the query, the user in the query, the key/value form.
    static func serverShapes() throws -> [String] {
        let server = try TestDatabase.serverURL()
        let query = try #require(URLComponents(string: server)?.queryItems)
        let host = try #require(query.first { $0.name == "host" }?.value)
        let port = try #require(query.first { $0.name == "port" }?.value)
        return [
            server,
            "postgresql://postgres@/?host=\(host)&port=\(port)",
            "postgres://postgres@localhost:\(port)/postgres?host=\(host)",
            "postgresql:///postgres?user=postgres&host=\(host)&port=\(port)",
            "host=\(host) port=\(port) user=postgres dbname=postgres",
        ]
    }

    @Test("every shape of server URL gives a URL that reaches the new database, and drop removes it")
    func everyShape() async throws {
        var reached: [String] = []
        for server in try TestDatabaseTests.serverShapes() {
            let name = try await withDatabase("shape", on: server) { url in
                try await offPool { try TestDatabase.psql(url, "SELECT current_database()") }
            }
            #expect(name.hasPrefix("shape_"), "\(server) reaches \(name)")
            reached.append(name)
            let left = try await offPool { try TestDatabase.psql(server, "SELECT count(*) FROM pg_database WHERE datname = '\(name)'") }
            #expect(left == "0", "\(name) was not dropped")
        }
        #expect(Set(reached).count == 5)
    }
}
