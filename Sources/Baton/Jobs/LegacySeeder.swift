import Foundation
import BatonPostgres

/// Walks the application's legacy user table in key order, a page at a time (keyset pagination: never
/// OFFSET, never all rows at once), and gives every user with an Apple subject a row in `baton.transfers`.
///
/// Users who already have one are skipped (`ON CONFLICT DO NOTHING`), so the walk is idempotent and several
/// processes may walk at once. When the configuration names a transfer column, a value found there is stored
/// as the user's transfer identifier, so no request is made for them.
public struct LegacySeeder: Sendable {
    /// The pool.
    public let pool: PostgresPool
    /// The legacy table and its columns, validated.
    public let legacy: BatonConfiguration.LegacyIdentifiers
    /// Users per page; default 1,000.
    public let pageSize: Int

    /// Creates a seeder.
    public init(pool: PostgresPool, legacy: BatonConfiguration.LegacyIdentifiers, pageSize: Int = 1_000) {
        self.pool = pool
        self.legacy = legacy
        self.pageSize = max(1, pageSize)
    }

    /// Walks the whole table; returns the rows added.
    public func seed() async throws -> Int {
        var after: String?
        var added = 0
        while true {
            let transfer = legacy.transferColumn.map { "u.\($0.quoted)::text" } ?? "NULL::text"
            let page: PostgresQuery
            let common = """
                SELECT u.\(legacy.keyColumn.quoted) AS key, u.\(legacy.subjectColumn.quoted)::text AS subject, \(transfer) AS transfer_sub
                FROM \(legacy.table.quoted) u WHERE true
                """
            let afterKey: PostgresQuery = after.map { "AND u.\(legacy.keyColumn) > \($0)" } ?? ""
            page = "WITH page AS (\(unsafeRaw: common)" + legacy.filterSQL() + " " + afterKey
                + " ORDER BY u.\(legacy.keyColumn) LIMIT \(pageSize)), \(unsafeRaw: Self.insertAndReport)"
            let row = try await pool.query(page)[0]
            guard let last = try row.decode(String?.self, at: 0) else { return added }
            added += try row.decode(Int.self, at: 1)
            after = last
        }
    }

    /// Legacy users who still need a transfer identifier (no row yet, or a pending row without one), and the
    /// subjects of the first `sample` of them in key order. Reads only: for the confirmation and `--dry-run`.
    public func preview(sample: Int = 3) async throws -> (count: Int, sample: [String]) {
        let l = legacy
        let transferCondition = l.transferColumn.map { "AND u.\($0.quoted) IS NULL" } ?? ""
        let needing = """
            FROM \(l.table.quoted) u LEFT JOIN baton.transfers t ON t.old_sub = u.\(l.subjectColumn.quoted)::text
            WHERE u.\(l.subjectColumn.quoted) IS NOT NULL AND u.\(l.subjectColumn.quoted)::text <> '' \(transferCondition)
              AND (t.old_sub IS NULL OR (t.state = 'pending' AND t.transfer_sub IS NULL))
              AND NOT EXISTS (SELECT 1 FROM baton.transfers m WHERE m.new_sub = u.\(l.subjectColumn.quoted)::text)
            """
        let count = try await pool.query("SELECT count(*) \(unsafeRaw: needing)" + l.filterSQL())[0].decode(Int.self, at: 0)
        let rows = try await pool.query("SELECT u.\(l.subjectColumn)::text \(unsafeRaw: needing)" + l.filterSQL()
                                        + " ORDER BY u.\(l.keyColumn) LIMIT \(max(0, sample))")
        return (count, try rows.map { try $0.decode(String.self, at: 0) })
    }

    /// Inserts the page's users that have a subject and are not already known (as old or new identifier), and
    /// returns the page's last key (as text) and the rows added.
    private static let insertAndReport = """
        added AS (
            INSERT INTO baton.transfers (old_sub, transfer_sub)
            SELECT p.subject, p.transfer_sub FROM page p
            WHERE p.subject IS NOT NULL AND p.subject <> ''
              AND NOT EXISTS (SELECT 1 FROM baton.transfers t WHERE t.new_sub = p.subject)
              AND (p.transfer_sub IS NULL OR NOT EXISTS (SELECT 1 FROM baton.transfers t WHERE t.transfer_sub = p.transfer_sub))
            ON CONFLICT (old_sub) DO NOTHING
            RETURNING 1
        )
        SELECT (SELECT key::text FROM page ORDER BY key DESC LIMIT 1), (SELECT count(*) FROM added)
        """
}
