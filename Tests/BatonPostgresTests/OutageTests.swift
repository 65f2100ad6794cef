import Foundation
import BatonPostgres
import TestSupport
import Testing

@Suite("Postgres pool across a server restart")
struct OutageTests {
    @Test("queries fail as connection failures while the server is down and succeed once it is back")
    func restart() async throws {
        let cluster = try PrivateCluster()
        let pool = PostgresPool(url: cluster.url, maxConnections: 2, acquireTimeout: .seconds(5))
        #expect(try await pool.query("SELECT 1")[0].decode(Int32.self, at: 0) == 1)
        try cluster.stop()
        do {
            try await pool.query("SELECT 1")
            Issue.record("expected a failure while the server is down")
        } catch let error as PostgresError {
            #expect(error.code == .connectionFailure || error.code == .serverShutdown)
        }
        try cluster.restart()
        #expect(try await pool.query("SELECT 2")[0].decode(Int32.self, at: 0) == 2)
        await pool.close()
        try cluster.destroy()
    }
}
