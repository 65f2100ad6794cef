import Foundation
import BatonPostgres

/// Baton's own tables (schema `baton`), from the numbered SQL files in `schema/`.
public enum BatonSchema {
    /// The schema that holds Baton's tables.
    public static let schema = try! PostgresIdentifier("baton")

    /// The advisory lock key that serializes `baton db migrate` runs ("baton" in ASCII).
    public static let migrationLockKey: Int64 = 0x6261_746F_6E

    /// The migrations shipped with this build.
    /// - Throws: ``PostgresError`` when the bundled files are missing or misnamed.
    public static func migrations() throws -> [Migration] {
        guard let directory = Bundle.module.url(forResource: "Schema", withExtension: nil) else {
            throw PostgresError(.invalidConfiguration, reason: "Baton's schema files are missing from the build")
        }
        return try Migration.load(directory: directory)
    }

    /// A migrator for Baton's schema.
    public static func migrator() throws -> Migrator {
        Migrator(migrations: try migrations(), schema: schema, lockKey: migrationLockKey)
    }
}
