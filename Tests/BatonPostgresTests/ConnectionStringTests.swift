import Foundation
import BatonPostgres
import TestSupport
import Testing

@Suite("Connection strings, read-only servers and replacement connections")
struct ConnectionStringTests {
    @Test("every form libpq accepts is accepted", arguments: [
        "postgresql://postgres@127.0.0.1:5432,127.0.0.1:5433/app?target_session_attrs=read-write",
        "postgres://baton:secret@db1,db2/app?target_session_attrs=primary&connect_timeout=3",
        "postgresql:///app?host=/var/run/postgresql",
        "postgresql://[::1]:5432/app",
        "host=10.0.0.1,10.0.0.2 port=5432,5433 dbname=app target_session_attrs=read-write",
        "service=baton",
        "postgresql:///?service=baton",
    ])
    func accepted(_ text: String) throws {
        #expect(throws: Never.self) { try PostgresConnectionString(text) }
    }

    @Test("what libpq refuses is refused, with libpq's reason and no quoted input", arguments: [
        "postgresql://baton:s3cret@db/app?bogus=s3cret",
        "host=db password=s3cret nonsense=1",
        "host=db password",
        "postgresql://baton:s3cret@[::1/app",
        "",
    ])
    func refused(_ text: String) throws {
        do {
            _ = try PostgresConnectionString(text)
            Issue.record("accepted: \(text)")
        } catch let error as PostgresError {
            #expect(error.code == .invalidConfiguration)
            #expect(!error.description.contains("s3cret"), "\(error)")
        }
    }

    @Test("the password is redacted wherever the string is printed", arguments: [
        "postgresql://baton:s3cret@db1:5432,db2:5433/app?target_session_attrs=read-write",
        "postgresql://baton@db1/app?password=s3cret",
        "host=db1,db2 user=baton password='s3cret with space' dbname=app",
    ])
    func redacted(_ text: String) throws {
        let string = try PostgresConnectionString(text)
        for printed in [string.redacted, "\(string)", String(reflecting: string)] {
            #expect(!printed.contains("s3cret"), "\(printed)")
            #expect(printed.contains("password=<redacted>"), "\(printed)")
            #expect(printed.contains("user=baton"), "\(printed)")
        }
        #expect(string.value(of: "host")?.hasPrefix("db1") == true)
    }

    @Test("every keyword libpq marks as secret is redacted, sslpassword too", arguments: [
        "postgresql://baton@db1/app?sslpassword=k3y-s3cret&password=s3cret&sslmode=require",
        "host=db1 user=baton sslpassword='k3y s3cret' dbname=app",
    ])
    func secretsRedacted(_ text: String) throws {
        let string = try PostgresConnectionString(text)
        #expect(string.isSecret("password") && string.isSecret("sslpassword"))
        #expect(!string.isSecret("user") && !string.isSecret("sslmode"))
        for printed in [string.redacted, "\(string)", String(reflecting: string)] {
            #expect(!printed.contains("s3cret"), "\(printed)")
            #expect(printed.contains("sslpassword=<redacted>"), "\(printed)")
            #expect(printed.contains("user=baton"), "\(printed)")
        }
    }

    @Test("a connection that meets a read-only server is dropped and replaced, never reused")
    func readOnlyDropped() async throws {
        let url = try TestDatabase.create("readonly")
        let pool = PostgresPool(url: url, maxConnections: 1, acquireTimeout: .seconds(5))
        let name = try await pool.query("SELECT current_database()")[0].decode(String.self, at: 0)
        try await pool.execute("CREATE TABLE t (n int)")
        _ = try TestDatabase.psql(try TestDatabase.serverURL(), "ALTER DATABASE \(name) SET default_transaction_read_only = on")
        // The pool's connection predates the change; a fresh one is read-only, like a demoted primary's.
        try await pool.withConnection { connection in
            _ = try await connection.executeScript(unsafeSQL: "SET default_transaction_read_only = on")
        }
        do {
            try await pool.execute("INSERT INTO t VALUES (1)")
            Issue.record("a write succeeded on a read-only server")
        } catch let error as PostgresError {
            #expect(error.code == .readOnly)
            #expect(error.isTransient)
        }
        #expect(await pool.statistics().open == 0, "the read-only connection was dropped")
        await #expect(throws: PostgresError.self) { try await pool.checkWritable() }
        #expect(await pool.statistics().open == 0)
        // The primary is writable again (a failover completed): the next connection writes.
        _ = try TestDatabase.psql(try TestDatabase.serverURL(), "ALTER DATABASE \(name) SET default_transaction_read_only = off")
        try await pool.checkWritable()
        #expect(try await pool.execute("INSERT INTO t VALUES (2)") == 1)
        await pool.close()
    }

    @Test("a replacement connection keeps the pool's statement_timeout")
    func replacementKeepsStatementTimeout() async throws {
        let url = try TestDatabase.create("timeout")
        let pool = PostgresPool(url: url, maxConnections: 1, acquireTimeout: .seconds(20), statementTimeoutMilliseconds: 250)
        #expect(try await pool.query("SHOW statement_timeout")[0].decode(String.self, at: 0) == "250ms")
        let waiter = try await pool.withConnection { connection in
            // A second caller queues for the only connection, which then breaks: it gets a replacement.
            let waiter = Task { try await pool.query("SHOW statement_timeout")[0].decode(String.self, at: 0) }
            while await pool.statistics().waiting == 0 { try await Task.sleep(for: .milliseconds(5)) }
            _ = try? await connection.query("SELECT pg_terminate_backend(pg_backend_pid())")
            return waiter
        }
        #expect(try await waiter.value == "250ms")
        await #expect(throws: PostgresError.self) { try await pool.query("SELECT pg_sleep(2)") }
        await pool.close()
    }

    @Test("a statement_timeout is added to the string's own options, not in place of them")
    func optionsKept() async throws {
        let url = try TestDatabase.create("options") + "&options=-c%20lock_timeout%3D123"
        let pool = PostgresPool(url: url, maxConnections: 1, statementTimeoutMilliseconds: 300)
        #expect(try await pool.query("SHOW statement_timeout")[0].decode(String.self, at: 0) == "300ms")
        #expect(try await pool.query("SHOW lock_timeout")[0].decode(String.self, at: 0) == "123ms")
        await pool.close()
    }
}
