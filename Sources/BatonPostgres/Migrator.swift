import Foundation

/// One numbered schema migration: `0001_create_tables.sql` is version 1 named `create_tables`.
public struct Migration: Sendable, Equatable {
    /// The version, unique and increasing.
    public var version: Int
    /// A short name for logs.
    public var name: String
    /// The SQL, one or more statements.
    public var sql: String

    /// Reads every `NNNN_name.sql` file in `directory`, sorted by version.
    /// - Throws: ``PostgresError`` with code `invalidConfiguration` for a misnamed file or a repeated version.
    public static func load(directory: URL) throws -> [Migration] {
        let files = try FileManager.default.contentsOfDirectory(at: directory, includingPropertiesForKeys: nil)
            .filter { $0.pathExtension == "sql" }
        var migrations: [Migration] = []
        for file in files {
            let base = file.deletingPathExtension().lastPathComponent
            guard let underscore = base.firstIndex(of: "_"), let version = Int(base[..<underscore]), version > 0 else {
                throw PostgresError(.invalidConfiguration, reason: "migration file \(file.lastPathComponent) is not named NNNN_name.sql")
            }
            let sql = try String(contentsOf: file, encoding: .utf8)
            migrations.append(Migration(version: version, name: String(base[base.index(after: underscore)...]), sql: sql))
        }
        migrations.sort { $0.version < $1.version }
        for (previous, next) in zip(migrations, migrations.dropFirst()) where previous.version == next.version {
            throw PostgresError(.invalidConfiguration, reason: "two migrations have version \(next.version)")
        }
        return migrations
    }
}

/// Applies pending migrations in order, each in its own transaction, recording applied versions in
/// `<schema>.schema_migrations`.
///
/// Safe to run from several processes at once: each migration's transaction first takes a transaction-level
/// advisory lock and checks again that the version is not applied, so a second run finds nothing to do. Nothing
/// outlives a transaction, so it also runs through a transaction-mode pooler.
public struct Migrator: Sendable {
    /// The migrations, in any order (they are applied by version).
    public let migrations: [Migration]
    /// The schema that holds the version table (created when missing).
    public let schema: PostgresIdentifier
    /// The advisory lock key that serializes migrating processes' transactions.
    public let lockKey: Int64

    /// Creates a migrator for `migrations`, recording versions in `schema.schema_migrations`.
    public init(migrations: [Migration], schema: PostgresIdentifier, lockKey: Int64) {
        self.migrations = migrations.sorted { $0.version < $1.version }
        self.schema = schema
        self.lockKey = lockKey
    }

    /// Versions already applied, in order.
    public func appliedVersions(_ pool: PostgresPool) async throws -> [Int] {
        try await pool.withConnection { try await appliedVersions(on: $0) }
    }

    /// Migrations not yet applied, in order.
    public func pending(_ pool: PostgresPool) async throws -> [Migration] {
        let applied = Set(try await appliedVersions(pool))
        return migrations.filter { !applied.contains($0.version) }
    }

    /// Applies every pending migration and returns the ones it applied.
    /// - Throws: ``PostgresError``; a failed migration is rolled back entirely and stops the run.
    @discardableResult
    public func migrate(_ pool: PostgresPool) async throws -> [Migration] {
        try await pool.withConnection { connection in
            let table = "\(schema.quoted).\"schema_migrations\""
            try await lockedTransaction(on: connection) { connection in
                try await connection.executeScript(unsafeSQL: """
                    CREATE SCHEMA IF NOT EXISTS \(schema.quoted);
                    CREATE TABLE IF NOT EXISTS \(table) (
                        version integer PRIMARY KEY,
                        name text NOT NULL,
                        applied_at timestamptz NOT NULL DEFAULT now()
                    );
                    """)
            }
            let done = Set(try await appliedVersions(on: connection))
            var applied: [Migration] = []
            for migration in migrations where !done.contains(migration.version) {
                let appliedHere = try await lockedTransaction(on: connection) { connection in
                    // Another process may have applied it while this one waited for the lock.
                    guard !(try await appliedVersions(on: connection)).contains(migration.version) else { return false }
                    try await connection.executeScript(unsafeSQL: migration.sql)
                    try await connection.execute("INSERT INTO \(unsafeRaw: table) (version, name) VALUES (\(migration.version), \(migration.name))")
                    return true
                }
                if appliedHere { applied.append(migration) }
            }
            return applied
        }
    }

    /// Runs `body` in a transaction holding the migrators' advisory lock, released at its end.
    private func lockedTransaction<T>(on connection: PostgresConnection, _ body: (PostgresConnection) async throws -> T) async throws -> T {
        try await connection.withTransaction { connection in
            try await connection.query("SELECT pg_advisory_xact_lock(\(lockKey))")
            return try await body(connection)
        }
    }

    private func appliedVersions(on connection: PostgresConnection) async throws -> [Int] {
        let exists = try await connection.query("SELECT to_regclass(\(schema.quoted + ".\"schema_migrations\"")) IS NOT NULL")
        guard try exists[0].decode(Bool.self, at: 0) else { return [] }
        let rows = try await connection.query("SELECT version FROM \(unsafeRaw: "\(schema.quoted).\"schema_migrations\"") ORDER BY version")
        return try rows.map { try $0.decode(Int.self, at: 0) }
    }
}
