import Baton
import Foundation
import BatonPostgres
import TestSupport

/// A fresh database with Baton's schema and an application table `public.users`
/// (`id bigserial`, `apple_sub text UNIQUE`, `email text`, `transfer_sub text`).
struct StoreFixture {
    let url: String
    let pool: PostgresPool
    let store: LegacyStore

    static let legacy = BatonConfiguration.Legacy(table: "public.users", keyColumn: "id", subjectColumn: "apple_sub",
                                                  emailColumn: "email", transferColumn: "transfer_sub")

    init(_ name: String = "baton", url: String? = nil, poolSize: Int = 8) async throws {
        self.url = try url ?? TestDatabase.create(name)
        pool = PostgresPool(url: self.url, maxConnections: poolSize, acquireTimeout: .seconds(30))
        _ = try await BatonSchema.migrator().migrate(pool)
        try await pool.withConnection { connection in
            try await connection.executeScript(unsafeSQL: """
                CREATE TABLE public.users (
                    id bigserial PRIMARY KEY,
                    apple_sub text UNIQUE,
                    email text,
                    transfer_sub text
                );
                """)
        }
        store = LegacyStore(pool: pool, legacy: try StoreFixture.legacy.identifiers())
    }

    /// Runs `body` with a fresh fixture and closes its pool afterwards, whatever happens.
    static func run(_ name: String = "baton", poolSize: Int = 8, _ body: (StoreFixture) async throws -> Void) async throws {
        let fixture = try await StoreFixture(name, poolSize: poolSize)
        try await withTeardown(fixture, teardown: { await $0.pool.close() }, body)
    }

    /// Inserts a legacy user and returns its key.
    @discardableResult
    func addUser(sub: String, email: String?, transferSub: String? = nil) async throws -> String {
        try await pool.query("INSERT INTO public.users (apple_sub, email, transfer_sub) VALUES (\(sub), \(email), \(transferSub)) RETURNING id::text")[0]
            .decode(String.self, at: 0)
    }

    /// Records a pending transfer `oldSub` → `transferSub` in `baton.transfers`.
    func addTransfer(oldSub: String, transferSub: String) async throws {
        try await pool.execute("INSERT INTO baton.transfers (old_sub, transfer_sub) VALUES (\(oldSub), \(transferSub))")
    }

    /// A single integer from `sql`, read through psql (independently of the code under test).
    func count(_ sql: String) throws -> Int {
        Int(try TestDatabase.psql(url, sql)) ?? -1
    }
}
