import BatonConcurrency
import BatonPostgres
import Foundation
import TestSupport
import Testing

/// What a pool keeps between transactions for each ``PostgresPooler``, seen from PostgreSQL itself (the
/// PgBouncer runs are in CLITests' PoolerTests).
@Suite("database.pooler: what a connection keeps between transactions")
struct PoolerModeTests {
    /// Whether `pool` offers a pipeline to an event loop's thread.
    private func offersPipeline(_ pool: PostgresPool) async throws -> Bool {
        let loop = try EventLoop()
        loop.start(name: "pooler-test")
        defer { loop.stop() }
        return await withCheckedContinuation { continuation in
            loop.execute { continuation.resume(returning: pool.pipeline(on: loop) != nil) }
        }
    }

    /// Fails unless the session's own `statement_timeout`, outside any transaction and without Baton setting it
    /// there, is `expected`: a `DO` block through the simple protocol, which the connection sends as it is.
    private func expectSessionTimeout(_ expected: String, on connection: PostgresConnection) async throws {
        try await connection.executeScript(unsafeSQL: """
            DO $$ BEGIN
                IF current_setting('statement_timeout') <> '\(expected)' THEN
                    RAISE EXCEPTION 'session statement_timeout is %', current_setting('statement_timeout');
                END IF;
            END $$
            """)
    }

    @Test("transaction: statements unnamed, the timeout set in each transaction and not in the session, no pipeline")
    func transaction() async throws {
        let url = try TestDatabase.create("pooler_tx")
        let pool = PostgresPool(url: url, maxConnections: 1, statementTimeoutMilliseconds: 250, pooler: .transaction)
        try await pool.withConnection { connection in
            for value in 0..<3 { #expect(try await connection.query("SELECT \(value)::int")[0].decode(Int.self, at: 0) == value) }
            #expect(try await connection.query("SELECT count(*)::int FROM pg_prepared_statements")[0].decode(Int.self, at: 0) == 0)
            #expect(try await connection.query("SELECT current_setting('statement_timeout')")[0].decode(String.self, at: 0) == "250ms")
            try await expectSessionTimeout("0", on: connection)
            await #expect(throws: PostgresError.self) { try await connection.query("SELECT pg_sleep(2)") }
            try await connection.withTransaction { (connection: PostgresConnection) async throws -> Void in
                #expect(try await connection.query("SELECT current_setting('statement_timeout')")[0].decode(String.self, at: 0) == "250ms")
                #expect(try await connection.execute("CREATE TABLE t (n int)") == 0)
                #expect(try await connection.query("SELECT current_setting('statement_timeout')")[0].decode(String.self, at: 0) == "250ms")
            }
            try await expectSessionTimeout("0", on: connection)
            // A failed statement inside a transaction: the rollback still runs, and the next transaction is clean.
            await #expect(throws: PostgresError.self) {
                try await connection.withTransaction { try await $0.query("SELECT 1/0") }
            }
            #expect(try await connection.query("SELECT count(*)::int FROM t")[0].decode(Int.self, at: 0) == 0)
        }
        #expect(try await offersPipeline(pool) == false)
        let direct = PostgresPool(url: url, maxConnections: 1)
        #expect(try await offersPipeline(direct) == true)
        await direct.close()
        await pool.close()
    }

    @Test("session: named statements, the timeout SET on the session, again after a reconnect")
    func session() async throws {
        let url = try TestDatabase.create("pooler_session")
        let pool = PostgresPool(url: url, maxConnections: 1, statementTimeoutMilliseconds: 300, pooler: .session)
        let backend = try await pool.withConnection { connection in
            try await expectSessionTimeout("300ms", on: connection)
            #expect(try await connection.query("SELECT count(*)::int FROM pg_prepared_statements")[0].decode(Int.self, at: 0) > 0)
            return try await connection.query("SELECT pg_backend_pid()")[0].decode(Int.self, at: 0)
        }
        // Terminated while idle: the health check reconnects (PQreset) and sets the timeout again.
        _ = try TestDatabase.psql(url, "SELECT pg_terminate_backend(\(backend), 5000)")
        try await pool.withConnection { connection in
            #expect(try await connection.query("SELECT pg_backend_pid()")[0].decode(Int.self, at: 0) != backend)
            try await expectSessionTimeout("300ms", on: connection)
        }
        await pool.close()
    }

    @Test("none: a pool straight to PostgreSQL is not taken for a transaction pooler")
    func directIsNotAPooler() async throws {
        let url = try TestDatabase.create("pooler_none")
        let pool = PostgresPool(url: url, maxConnections: 2)
        #expect(try await pool.query("SELECT 1::int")[0].decode(Int.self, at: 0) == 1)
        await pool.close()
    }
}
