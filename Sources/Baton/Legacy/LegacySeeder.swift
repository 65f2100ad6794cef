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
        let subject = legacy.subjectValueSQL()
        return "u.\(column.quoted) IS NOT NULL AND u.\(column.quoted)::text <> '' AND (\(subject) IS NULL OR \(subject)::text = '')"
    }

    /// Walks the rows of the legacy table meeting `condition` (and the configured filters) in key order, a page at
    /// a time, running `insert` over each page; returns the rows added.
    ///
    /// A page is the keys after the previous page's last up to its own last, which a read of the keys alone finds
    /// (``pageEnd(after:where:)``), so the inserts of ``pagesInFlight`` pages run at once: an insert is one backend's
    /// work on one core, and a ten-million-user rehearsal's walk, a page at a time, kept one of two cores busy.
    /// Pages inserted at once can meet in the unique indexes (two legacy rows with one subject); a page that loses a
    /// deadlock is inserted again, which adds only what is still missing.
    private func walk(where condition: String, insert: String) async throws -> Int {
        try await withThrowingTaskGroup(of: Int.self) { group in
            var after: String?
            var added = 0
            var inFlight = 0
            while true {
                let last = try await pageEnd(after: after, where: condition)
                group.addTask { [after] in try await insertPage(after: after, through: last, where: condition, insert: insert) }
                inFlight += 1
                if inFlight == Self.pagesInFlight, let rows = try await group.next() {
                    added += rows
                    inFlight -= 1
                }
                guard let last else { break }
                after = last
            }
            for try await rows in group { added += rows }
            return added
        }
    }

    /// Page inserts running at once.
    static let pagesInFlight = 2

    /// The key (as text) ending the page that follows `after` (the table's start when nil): the ``pageSize``th key
    /// meeting `condition` after it, or nil when fewer are left (the page is then the rest of the table).
    private func pageEnd(after: String?, where condition: String) async throws -> String? {
        let key = "u.\(legacy.keyColumn.quoted)"
        let afterKey: PostgresQuery = after.map { "AND \(unsafeRaw: key) > \($0)" } ?? ""
        let query: PostgresQuery = "SELECT \(unsafeRaw: key)::text FROM \(unsafeRaw: legacy.table.quoted) u WHERE \(unsafeRaw: condition)"
            + legacy.filterSQL() + " " + afterKey + " ORDER BY \(unsafeRaw: key) OFFSET \(pageSize - 1) LIMIT 1"
        return try await pool.query(query).first?.decode(String.self, at: 0)
    }

    /// Runs `insert` over the rows meeting `condition` with keys after `after` and up to `last` (nil: no bound);
    /// returns the rows added. A deadlock with a page inserted at once is retried.
    private func insertPage(after: String?, through last: String?, where condition: String, insert: String) async throws -> Int {
        let key = "u.\(legacy.keyColumn.quoted)"
        let transfer = legacy.transferColumn.map { "u.\($0.quoted)::text" } ?? "NULL::text"
        let common = """
            SELECT \(key) AS key, \(legacy.subjectSQL()) AS subject, \(transfer) AS transfer_sub
            FROM \(legacy.table.quoted) u WHERE \(condition)
            """
        let afterKey: PostgresQuery = after.map { "AND \(unsafeRaw: key) > \($0)" } ?? ""
        let throughKey: PostgresQuery = last.map { " AND \(unsafeRaw: key) <= \($0)" } ?? ""
        let page: PostgresQuery = "WITH page AS (\(unsafeRaw: common)" + legacy.filterSQL() + " " + afterKey + throughKey
            + "), \(unsafeRaw: insert) SELECT count(*) FROM added"
        var attempt = 0
        while true {
            do {
                return try await pool.query(page)[0].decode(Int.self, at: 0)
            } catch let error as PostgresError where error.kind == .contention && attempt < 5 {
                attempt += 1
            }
        }
    }

    /// Legacy users who still need a transfer identifier (no row yet, or a pending row without one), and the
    /// subjects of the first `sample` of them in key order. Reads only: for the confirmation and `--dry-run`.
    public func preview(sample: Int = 3) async throws -> (count: Int, sample: [String]) {
        let l = legacy
        let transferCondition = l.transferColumn.map { "AND u.\($0.quoted) IS NULL" } ?? ""
        let needing = """
            FROM \(l.table.quoted) u LEFT JOIN baton.transfers t ON t.old_sub = \(l.subjectSQL())
            WHERE \(l.subjectValueSQL()) IS NOT NULL AND \(l.subjectValueSQL())::text <> '' \(transferCondition)
              AND (t.old_sub IS NULL OR (t.state = 'pending' AND t.transfer_sub IS NULL))
              AND NOT EXISTS (SELECT 1 FROM baton.transfers m WHERE m.new_sub = \(l.subjectSQL()))
            """
        let count = try await pool.query("SELECT count(*) \(unsafeRaw: needing)" + l.filterSQL())[0].decode(Int.self, at: 0)
        let rows = try await pool.query("SELECT \(unsafeRaw: l.subjectSQL()) \(unsafeRaw: needing)" + l.filterSQL()
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
}
