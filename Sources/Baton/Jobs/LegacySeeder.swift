import Foundation
import BatonPostgres

/// Walks the application's legacy user table in key order, a page at a time (keyset pagination: never
/// OFFSET, never all rows at once), and gives its users rows in `baton.transfers`: on the sender's side every
/// user with an Apple subject (``seed()``), on the recipient's side between companies every row whose transfer
/// column holds a transfer identifier (``seedTransferColumn()``).
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

    /// The sender's walk, over the whole table; returns the rows added.
    public func seed() async throws -> Int {
        try await walk(where: "true", insert: Self.insertSubjects)
    }

    /// The recipient's walk between companies: every row whose ``BatonConfiguration/LegacyIdentifiers/transferColumn``
    /// holds a transfer identifier (loaded from the sender's export, the subject still NULL) that no
    /// `baton.transfers` row knows gets a pending row naming it by key, as `baton import transfers` of a
    /// `key,transfer_sub` file made from that column would; returns the rows added (0 without a transfer column).
    public func seedTransferColumn() async throws -> Int {
        guard legacy.transferColumn != nil else { return 0 }
        return try await walk(where: Self.awaitingExchange(legacy), insert: Self.insertTransferColumn)
    }

    /// The condition on a legacy row (alias `u`) that ``seedTransferColumn()`` would queue and has not yet: a
    /// transfer identifier in the transfer column that no `baton.transfers` row holds, no subject, the configured
    /// filters. Nil without a transfer column. Such users are pending all the same: the report counts and lists
    /// them, `--dry-run` counts them.
    public static func unqueuedTransferColumnRows(_ legacy: BatonConfiguration.LegacyIdentifiers) -> PostgresQuery? {
        guard let column = legacy.transferColumn else { return nil }
        return "\(unsafeRaw: awaitingExchange(legacy))" + legacy.filterSQL()
            + " AND NOT EXISTS (SELECT 1 FROM baton.transfers t WHERE t.transfer_sub = u.\(column)::text)"
    }

    /// How many legacy rows meet ``unqueuedTransferColumnRows(_:)`` (the statement; nil without a transfer column).
    public static func unqueuedTransferColumnCount(_ legacy: BatonConfiguration.LegacyIdentifiers) -> PostgresQuery? {
        unqueuedTransferColumnRows(legacy).map { "SELECT count(*) FROM \(legacy.table) u WHERE " + $0 }
    }

    /// The recipient's rows awaiting an exchange: a transfer identifier in the transfer column, no subject yet.
    private static func awaitingExchange(_ legacy: BatonConfiguration.LegacyIdentifiers) -> String {
        guard let column = legacy.transferColumn else { return "false" }
        let subject = "u.\(legacy.subjectColumn.quoted)"
        return "u.\(column.quoted) IS NOT NULL AND u.\(column.quoted)::text <> '' AND (\(subject) IS NULL OR \(subject)::text = '')"
    }

    /// Walks the rows of the legacy table meeting `condition` (and the configured filters) in key order, a page at
    /// a time, running `insert` over each page; returns the rows added.
    private func walk(where condition: String, insert: String) async throws -> Int {
        var after: String?
        var added = 0
        while true {
            let transfer = legacy.transferColumn.map { "u.\($0.quoted)::text" } ?? "NULL::text"
            let page: PostgresQuery
            let common = """
                SELECT u.\(legacy.keyColumn.quoted) AS key, u.\(legacy.subjectColumn.quoted)::text AS subject, \(transfer) AS transfer_sub
                FROM \(legacy.table.quoted) u WHERE \(condition)
                """
            let afterKey: PostgresQuery = after.map { "AND u.\(legacy.keyColumn) > \($0)" } ?? ""
            page = "WITH page AS (\(unsafeRaw: common)" + legacy.filterSQL() + " " + afterKey
                + " ORDER BY u.\(legacy.keyColumn) LIMIT \(pageSize)), \(unsafeRaw: insert) \(unsafeRaw: Self.report)"
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

    /// Inserts the page's users that have a subject and are not already known (as old or new identifier).
    private static let insertSubjects = """
        added AS (
            INSERT INTO baton.transfers (old_sub, transfer_sub)
            SELECT p.subject, p.transfer_sub FROM page p
            WHERE p.subject IS NOT NULL AND p.subject <> ''
              AND NOT EXISTS (SELECT 1 FROM baton.transfers t WHERE t.new_sub = p.subject)
              AND (p.transfer_sub IS NULL OR NOT EXISTS (SELECT 1 FROM baton.transfers t WHERE t.transfer_sub = p.transfer_sub))
            ON CONFLICT (old_sub) DO NOTHING
            RETURNING 1
        )
        """

    /// Inserts the page's transfer identifiers that no row holds yet (one `import transfers` already loaded, or a
    /// sign-in already migrated), each with the row's key.
    private static let insertTransferColumn = """
        added AS (
            INSERT INTO baton.transfers (legacy_key, transfer_sub)
            SELECT p.key::text, p.transfer_sub FROM page p
            ON CONFLICT (transfer_sub) DO NOTHING
            RETURNING 1
        )
        """

    /// The page's last key (as text) and the rows added.
    private static let report = "SELECT (SELECT key::text FROM page ORDER BY key DESC LIMIT 1), (SELECT count(*) FROM added)"
}
