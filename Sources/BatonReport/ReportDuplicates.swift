import Baton
import Foundation
import BatonPostgres

extension MigrationReport {
    /// The duplicates `baton.duplicates` holds: second records made under the receiving team's identifier during
    /// the cutover, beside the user's legacy record (`baton merge` moves the identifier onto the legacy one).
    public struct Duplicates: Sendable, Equatable, Codable {
        /// Every pair recorded, merged or not.
        public var count = 0
        /// The pairs still waiting for a merge.
        public var unmerged = 0
        /// The pairs listed, oldest first (at most the builder's limit).
        public var items: [DuplicateItem] = []

        /// Reads the section: the counts, and the first `limit` pairs.
        /// - Throws: `PostgresError`.
        public static func read(from pool: PostgresPool, limit: Int) async throws -> Duplicates {
            let counts = try await pool.query("SELECT count(*), count(*) FILTER (WHERE merged_at IS NULL) FROM baton.duplicates")[0]
            let items = try await LegacyStore.duplicates(in: pool, limit: limit).map { duplicate in
                DuplicateItem(freshKey: duplicate.pair.freshKey, legacyKey: duplicate.pair.legacyKey, foundBy: duplicate.foundBy.rawValue,
                              merged: duplicate.mergedAt != nil, foundAt: duplicate.foundAt, freshCreatedAt: duplicate.freshCreatedAt)
            }
            return Duplicates(count: try counts.decode(Int.self, at: 0), unmerged: try counts.decode(Int.self, at: 1), items: items)
        }
    }

    /// One pair.
    public struct DuplicateItem: Sendable, Equatable, Codable {
        /// The fresh record's key, as text.
        public var freshKey: String
        /// The legacy record's key, as text.
        public var legacyKey: String
        /// The path that met the pair first: `signin`, `exchange` or `link`.
        public var foundBy: String
        /// Whether it was merged.
        public var merged: Bool
        /// When it was recorded.
        public var foundAt: Date
        /// The fresh record's creation time (`legacy.created_at_column`), when configured.
        public var freshCreatedAt: Date?

        /// `merged` or `waiting`.
        var status: String { merged ? "merged" : "waiting" }
    }

    /// The duplicates section's heading, as the table and the page show it.
    var duplicatesHeading: String {
        "Duplicates (\(ReportFormat.count(duplicates.count)); \(ReportFormat.count(duplicates.unmerged)) waiting for baton merge)"
    }

    /// The CSV header of the duplicates section: `fresh_key,legacy_key,found_by,merged,found_at,fresh_created_at`.
    public static let duplicatesCSVHeader = "fresh_key,legacy_key,found_by,merged,found_at,fresh_created_at"

    /// The duplicates as a CSV section of their own, after the unresolved users: an empty line, the count line
    /// `duplicates,N`, ``duplicatesCSVHeader``, one line per pair listed. Empty when there is none, so a
    /// mailer reading the unresolved users sees the same file as before.
    public static func duplicatesCSV(_ duplicates: Duplicates) -> String {
        guard duplicates.count > 0 else { return "" }
        let lines = duplicates.items.map { item in
            [item.freshKey, item.legacyKey, item.foundBy, item.merged ? "true" : "false", ReportFormat.timestamp(item.foundAt),
             item.freshCreatedAt.map(ReportFormat.timestamp) ?? ""].map(csvField).joined(separator: ",")
        }
        return (["", "duplicates,\(duplicates.count)", duplicatesCSVHeader] + lines).joined(separator: "\r\n") + "\r\n"
    }
}
