import Foundation
@testable import BatonPostgres
import TestSupport
import Testing

@Suite("Postgres over a real server")
struct PostgresTests {
    let url: String
    let pool: PostgresPool

    init() throws {
        url = try TestDatabase.create("pg")
        pool = PostgresPool(url: url, maxConnections: 4, acquireTimeout: .seconds(20))
    }

    @Test("every supported type round-trips, NULL included")
    func roundTrip() async throws {
        let date = Date(timeIntervalSince1970: 1_764_000_123.456789)
        let uuid = UUID()
        let bytes: [UInt8] = [0, 1, 2, 0xFE, 0xFF, 0x5C, 0x27]
        let big = String(repeating: "é漢🙂x", count: 1 << 18)  // well over 1 MiB of UTF-8
        let rows = try await pool.query("""
            SELECT \("héllo, 世界 🙂")::text, \(Int64.max)::int8, \(Int32.min)::int4, \(Int(-42))::int8,
                   \(3.25)::float8, \(true)::bool, \(false)::bool, \(date)::timestamptz, \(uuid)::uuid,
                   \(bytes)::bytea, \(PostgresJSON(["a": [1, 2]]))::jsonb, \(Optional<String>.none)::text,
                   \(Optional<Int>.none)::int8, \(big)::text, \(Data(bytes))::bytea
            """)
        #expect(rows.count == 1)
        let row = rows[0]
        #expect(try row.decode(String.self, at: 0) == "héllo, 世界 🙂")
        #expect(try row.decode(Int64.self, at: 1) == Int64.max)
        #expect(try row.decode(Int32.self, at: 2) == Int32.min)
        #expect(try row.decode(Int.self, at: 3) == -42)
        #expect(try row.decode(Double.self, at: 4) == 3.25)
        #expect(try row.decode(Bool.self, at: 5) == true)
        #expect(try row.decode(Bool.self, at: 6) == false)
        let decodedDate = try row.decode(Date.self, at: 7)
        #expect(abs(decodedDate.timeIntervalSince(date)) < 0.000_002)
        #expect(try row.decode(UUID.self, at: 8) == uuid)
        #expect(try row.decode([UInt8].self, at: 9) == bytes)
        #expect(try row.decode(PostgresJSON<[String: [Int]]>.self, at: 10).value == ["a": [1, 2]])
        #expect(try row.decode(String?.self, at: 11) == nil)
        #expect(try row.decode(Int?.self, at: 12) == nil)
        #expect(try row.decode(String.self, at: 13) == big)
        #expect(try row.decode(Data.self, at: 14) == Data(bytes))
        #expect(throws: PostgresError.self) { try row.decode(String.self, at: 11) }
        #expect(throws: PostgresError.self) { try row.decode(Int.self, at: 0) }
    }

    @Test("timestamps in another session time zone decode to the same instant")
    func timeZones() async throws {
        let date = Date(timeIntervalSince1970: 1_700_000_000.5)
        let decoded = try await pool.withTransaction { connection in
            try await connection.execute("SET LOCAL TIME ZONE 'Asia/Kolkata'")
            return try await connection.query("SELECT \(date)::timestamptz")[0].decode(Date.self, at: 0)
        }
        #expect(abs(decoded.timeIntervalSince(date)) < 0.000_002)
    }

    @Test("injection strings are stored and read back verbatim", arguments: [
        "'; DROP TABLE notes; --",
        "\\x00\\' OR '1'='1",
        "$1 $2 $$ dollar $$",
        "Robert'); DELETE FROM notes WHERE ('1' = '1",
        "\"quoted\" \\ backslash \u{7}",
    ])
    func injection(value: String) async throws {
        try await pool.execute("CREATE TABLE IF NOT EXISTS notes (id serial PRIMARY KEY, body text NOT NULL)")
        let id = try await pool.query("INSERT INTO notes (body) VALUES (\(value)) RETURNING id")[0].decode(Int.self, at: 0)
        let back = try await pool.query("SELECT body FROM notes WHERE id = \(id) AND body = \(value)")
        #expect(back.count == 1)
        #expect(try back[0].decode(String.self, at: 0) == value)
        #expect(try TestDatabase.psql(url, "SELECT to_regclass('notes') IS NOT NULL") == "t")
    }

    @Test("a text parameter holding NUL is refused, not cut short; bytea may hold NUL")
    func nulRefused() async throws {
        let error = await #expect(throws: PostgresError.self) {
            try await pool.query("SELECT \("admin\u{0}-and-more")::text = 'admin'")
        }
        #expect(error?.code == .invalidParameter)
        let bytes: [UInt8] = [0x61, 0, 0x62]
        #expect(try await pool.query("SELECT length(\(bytes)::bytea)")[0].decode(Int.self, at: 0) == 3)
    }

    @Test("a failing statement inside withTransaction rolls back everything before it")
    func rollback() async throws {
        try await pool.execute("CREATE TABLE accounts (id int PRIMARY KEY, balance int NOT NULL)")
        try await pool.execute("INSERT INTO accounts VALUES (1, 100)")
        await #expect(throws: PostgresError.self) {
            try await pool.withTransaction { connection in
                try await connection.execute("UPDATE accounts SET balance = 0 WHERE id = 1")
                try await connection.execute("INSERT INTO accounts VALUES (2, 5)")
                try await connection.execute("INSERT INTO accounts VALUES (1, 7)")  // duplicate key
            }
        }
        #expect(try TestDatabase.psql(url, "SELECT string_agg(id || ':' || balance, ',') FROM accounts") == "1:100")
        // A Swift error rolls back too.
        struct Abort: Error {}
        await #expect(throws: Abort.self) {
            try await pool.withTransaction { connection in
                try await connection.execute("DELETE FROM accounts")
                throw Abort()
            }
        }
        #expect(try TestDatabase.psql(url, "SELECT count(*) FROM accounts") == "1")
        // And the pool is still healthy afterwards.
        #expect(try await pool.query("SELECT 1")[0].decode(Int32.self, at: 0) == 1)
    }

    @Test("isolation level is applied")
    func isolation() async throws {
        let level = try await pool.withTransaction(isolation: .serializable) { connection in
            try await connection.query("SHOW transaction_isolation")[0].decode(String.self, at: 0)
        }
        #expect(level == "serializable")
    }

    @Test("a unique violation surfaces as its own code, with no values in its description")
    func uniqueViolation() async throws {
        try await pool.execute("CREATE TABLE people (email text UNIQUE)")
        try await pool.execute("INSERT INTO people VALUES (\("jane@example.com"))")
        do {
            try await pool.execute("INSERT INTO people VALUES (\("jane@example.com"))")
            Issue.record("expected a unique violation")
        } catch let error as PostgresError {
            #expect(error.code == .uniqueViolation)
            #expect(error.sqlState == "23505")
            #expect(!error.description.contains("jane@example.com"))
            #expect(error.debugDescription.contains("jane@example.com"))
        }
    }

    @Test("a data exception, whose server message quotes the value, keeps the value out of its description")
    func dataExceptionHidesValue() async throws {
        do {
            try await pool.query("SELECT \("001234.secretsub")::integer")
            Issue.record("expected a data exception")
        } catch let error as PostgresError {
            #expect(error.sqlState == "22P02")
            #expect(!error.description.contains("001234.secretsub"))
            #expect(error.debugDescription.contains("001234.secretsub"))
        }
    }

    @Test("SQL errors carry SQLSTATE codes")
    func sqlState() async throws {
        await #expect(throws: PostgresError.self) { try await pool.query("SELECT * FROM no_such_table") }
        do {
            try await pool.query("SELECT * FROM no_such_table")
        } catch let error as PostgresError {
            #expect(error.code == .undefinedObject)
            #expect(error.sqlState == "42P01")
        }
    }

    @Test("64 concurrent tasks on a pool of 4 all complete")
    func concurrency() async throws {
        let sums = try await withThrowingTaskGroup(of: Int.self) { group in
            for index in 0..<64 {
                group.addTask {
                    try await pool.query("SELECT \(index)::int8 + 1, pg_sleep(0.01)")[0].decode(Int.self, at: 0)
                }
            }
            return try await group.reduce(into: [Int]()) { $0.append($1) }
        }
        #expect(sums.sorted() == Array(1...64))
        let stats = await pool.statistics()
        #expect(stats.open <= 4)
        #expect(stats.waiting == 0)
    }

    @Test("a connection killed by the server is replaced and the next query succeeds")
    func terminatedConnection() async throws {
        let single = PostgresPool(url: url, maxConnections: 1)
        let pid = try await single.query("SELECT pg_backend_pid()")[0].decode(Int32.self, at: 0)
        #expect(try TestDatabase.psql(url, "SELECT pg_terminate_backend(\(pid))") == "t")
        try await Task.sleep(for: .milliseconds(100))
        let newPID = try await single.query("SELECT pg_backend_pid()")[0].decode(Int32.self, at: 0)
        #expect(newPID != pid)
        await single.close()
    }

    @Test("a connection killed mid-transaction fails that transaction and the pool recovers")
    func terminatedInTransaction() async throws {
        let single = PostgresPool(url: url, maxConnections: 1)
        await #expect(throws: PostgresError.self) {
            try await single.withTransaction { connection in
                let pid = try await connection.query("SELECT pg_backend_pid()")[0].decode(Int32.self, at: 0)
                _ = try TestDatabase.psql(url, "SELECT pg_terminate_backend(\(pid))")
                try await Task.sleep(for: .milliseconds(100))
                try await connection.query("SELECT 1")
            }
        }
        #expect(try await single.query("SELECT 41 + 1")[0].decode(Int32.self, at: 0) == 42)
        await single.close()
    }

    @Test("a caller waits at most the acquire timeout for a free connection")
    func poolTimeout() async throws {
        let single = PostgresPool(url: url, maxConnections: 1, acquireTimeout: .milliseconds(200))
        async let holder: Void = single.withConnection { connection in
            try await connection.query("SELECT pg_sleep(1.5)")
        }
        try await Task.sleep(for: .milliseconds(300))
        do {
            try await single.query("SELECT 1")
            Issue.record("expected a pool timeout")
        } catch let error as PostgresError {
            #expect(error.code == .poolTimeout)
        }
        try await holder
        #expect(try await single.query("SELECT 2")[0].decode(Int32.self, at: 0) == 2)
        await single.close()
    }

    @Test("an unreachable server is a connection failure")
    func unreachable() async throws {
        let bad = PostgresPool(url: "postgresql://postgres@/postgres?host=/nonexistent-baton-socket&port=1")
        do {
            try await bad.query("SELECT 1")
            Issue.record("expected a connection failure")
        } catch let error as PostgresError {
            #expect(error.code == .connectionFailure)
        }
    }

    @Test("identifiers from configuration are validated and quoted", arguments: [
        ("users", "\"users\"", true), ("public.users", "\"public\".\"users\"", true), ("_a1", "\"_a1\"", true),
        ("users; DROP TABLE x", "", false), ("a.b.c", "", false), ("1users", "", false), ("us\"ers", "", false),
        ("", "", false), ("public.", "", false), (String(repeating: "a", count: 64), "", false),
    ])
    func identifiers(name: String, quoted: String, valid: Bool) throws {
        if valid {
            #expect(try PostgresIdentifier(name).quoted == quoted)
        } else {
            #expect(throws: PostgresError.self) { try PostgresIdentifier(name) }
        }
    }

    @Test("migrations apply once, in order, and record their versions")
    func migrator() async throws {
        let schema = try PostgresIdentifier("mig")
        let migrations = [
            Migration(version: 2, name: "second", sql: "ALTER TABLE mig.things ADD COLUMN label text;"),
            Migration(version: 1, name: "first", sql: "CREATE TABLE mig.things (id int PRIMARY KEY); INSERT INTO mig.things VALUES (1);"),
        ]
        let migrator = Migrator(migrations: migrations, schema: schema, lockKey: 99)
        #expect(try await migrator.pending(pool).map(\.version) == [1, 2])
        #expect(try await migrator.migrate(pool).map(\.version) == [1, 2])
        #expect(try await migrator.migrate(pool).isEmpty)
        #expect(try await migrator.appliedVersions(pool) == [1, 2])
        // A failing migration is rolled back whole and stops the run.
        let broken = Migrator(migrations: migrations + [
            Migration(version: 3, name: "broken", sql: "CREATE TABLE mig.more (id int); SELECT * FROM nowhere;"),
        ], schema: schema, lockKey: 99)
        await #expect(throws: PostgresError.self) { try await broken.migrate(pool) }
        #expect(try TestDatabase.psql(url, "SELECT to_regclass('mig.more') IS NULL") == "t")
        #expect(try await broken.appliedVersions(pool) == [1, 2])
    }
}
