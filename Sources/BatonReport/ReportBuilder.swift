import Baton
import Foundation
import BatonPostgres

/// Computes a ``MigrationReport`` from `baton.transfers` (and the application's table for the unresolved
/// users' keys and emails): the totals, days, pace and reasons from the counts kept as rows change
/// (``ReportCounts``, schema 0013), and only the page of unresolved users the caller asks for is read.
///
/// ```swift
/// let report = try await ReportBuilder(pool: pool, legacy: configuration.legacy,
///                                      acceptedAt: configuration.apple.transfer?.acceptedAt).build()
/// print(report.renderTable())
/// ```
public struct ReportBuilder: Sendable {
    /// Whether unresolved users' emails are masked.
    public enum Emails: Sendable, Equatable {
        /// `j***@example.com`: the first character and the domain (the default).
        case masked
        /// The addresses as stored, for a mailer; never for a page or a log.
        case unmasked
    }

    /// The default number of unresolved users listed: 100.
    public static let defaultLimit = 100
    /// The most distinct failure reasons listed: 50 (the rest are counted in `omittedReasons`).
    public static let reasonLimit = 50

    private let pool: PostgresPool
    private let legacy: BatonConfiguration.Legacy?
    private let acceptedAt: Date?
    private let now: Date
    private let limit: Int
    private let after: String?
    private let emails: Emails

    /// Creates a builder.
    /// - Parameters:
    ///   - pool: the database holding Baton's schema and the application's table.
    ///   - legacy: the application's table, to list each unresolved user's key and email; nil lists
    ///     identifiers only.
    ///   - acceptedAt: when the recipient accepted the transfer (`apple.transfer.accepted_at`); nil leaves
    ///     out the window figures.
    ///   - now: the clock; default the current time.
    ///   - limit: unresolved users to list, 0 or more; default ``defaultLimit``.
    ///   - after: list unresolved users whose `old_sub` sorts after this one (the previous page's
    ///     `nextAfter`); default from the first.
    ///   - emails: masked (default) or as stored.
    public init(
        pool: PostgresPool,
        legacy: BatonConfiguration.Legacy?,
        acceptedAt: Date?,
        now: Date = Date(),
        limit: Int = ReportBuilder.defaultLimit,
        after: String? = nil,
        emails: Emails = .masked
    ) {
        self.pool = pool
        self.legacy = legacy
        self.acceptedAt = acceptedAt
        self.now = now
        self.limit = max(0, limit)
        self.after = after
        self.emails = emails
    }

    /// Creates a builder from the configuration: its `legacy` table and `apple.transfer.accepted_at`.
    public init(
        pool: PostgresPool,
        configuration: BatonConfiguration,
        now: Date = Date(),
        limit: Int = ReportBuilder.defaultLimit,
        after: String? = nil,
        emails: Emails = .masked
    ) {
        self.init(pool: pool, legacy: configuration.legacy, acceptedAt: configuration.apple.transfer?.acceptedAt,
                  now: now, limit: limit, after: after, emails: emails)
    }

    /// Builds the report.
    /// - Throws: ``ConfigurationError`` (`invalidValue`) for an invalid legacy table or column name;
    ///   `PostgresError` when a query fails (for example a missing legacy column).
    public func build() async throws -> MigrationReport {
        let identifiers = try legacy?.identifiers()
        // One more unresolved user than asked, to know whether another page follows.
        let pageLimit = limit == 0 || limit == .max ? limit : limit + 1
        let (counts, refused, days, pace, reasons, listed, unqueued) = try await pool.withConnection { connection in
            try await ReportCounts.fold(connection)
            // One snapshot for every figure and the list, so they agree even while workers write.
            return try await connection.withTransaction(isolation: .repeatableRead) { connection in
                (
                    try await stateMethodCounts(connection),
                    try await ReportCounts.refused(connection),
                    try await dayCounts(connection),
                    try await paceCount(connection),
                    try await reasonCounts(connection),
                    try await page(connection, after: after, limit: pageLimit, identifiers: identifiers),
                    try await unqueuedTransferColumnCount(connection, identifiers)
                )
            }
        }
        var unresolvedPage = listed
        var nextAfter: String?
        if limit > 0, unresolvedPage.count > limit {
            unresolvedPage.removeLast(unresolvedPage.count - limit)
            nextAfter = unresolvedPage.last?.oldSub
        }

        let byState = { (state: String) in counts.filter { $0.key.state == state }.reduce(0) { $0 + $1.value } }
        let totals = MigrationReport.Totals(
            migrated: byState("migrated"),
            pending: byState("pending") + unqueued,
            failed: byState("failed"),
            unresolvable: byState("unresolvable"),
            unmatchedSignins: try await pool.query("""
                SELECT count(DISTINCT e.transfer_sub) FROM baton.events AS e
                WHERE e.kind = 'unmatched'
                  AND NOT EXISTS (SELECT 1 FROM baton.transfers AS t WHERE t.transfer_sub = e.transfer_sub AND t.state = 'migrated')
                """)[0].decode(Int.self, at: 0)
        )
        let methods = MigrationReport.Method.allCases.map { method in
            MigrationReport.MethodOutcome(method: method, migrated: counts[StateMethod(state: "migrated", method: method.rawValue)] ?? 0)
        }
        let window = MigrationReport.Window(acceptedAt: acceptedAt, now: now)
        return MigrationReport(
            generatedAt: now,
            window: window,
            totals: totals,
            refused: MigrationReport.Refused(transferIdentifiers: refused.transferIdentifiers, exchange: refused.exchange,
                                             signin: totals.unmatchedSignins),
            methods: methods,
            perDay: fillDays(days),
            projection: ReportBuilder.projection(totals: totals, window: window, migratedInPeriod: pace.count, periodDays: pace.days, now: now),
            failures: reasons,
            unresolved: MigrationReport.UnresolvedList(
                total: totals.unresolved,
                users: unresolvedPage,
                nextAfter: nextAfter
            ),
            duplicates: try await MigrationReport.Duplicates.read(from: pool, limit: limit)
        )
    }

    /// The duplicates section alone, every pair listed (`baton report --format csv` appends it).
    /// - Throws: `PostgresError`.
    public func duplicates() async throws -> MigrationReport.Duplicates {
        try await MigrationReport.Duplicates.read(from: pool, limit: .max)
    }

    /// Reads the unresolved users, `pageSize` at a time in `old_sub` order (after the builder's `after`),
    /// handing each page to `body`: the full list for a mailer, without holding it in memory.
    /// - Parameters:
    ///   - pageSize: users per page (and per query), at least 1; default 1,000.
    ///   - limit: users read at most; default all of them.
    /// - Throws: what `body` throws; ``ConfigurationError`` or `PostgresError` as ``build()``.
    public func forEachUnresolvedPage(pageSize: Int = 1_000, limit: Int = .max, _ body: ([MigrationReport.UnresolvedUser]) async throws -> Void) async throws {
        let identifiers = try legacy?.identifiers()
        var cursor = after
        var remaining = max(0, limit)
        while remaining > 0 {
            let size = min(max(1, pageSize), remaining)
            let users = try await pool.withConnection { connection in
                try await page(connection, after: cursor, limit: size, identifiers: identifiers)
            }
            if users.isEmpty { return }
            try await body(users)
            remaining -= users.count
            if users.count < size { return }
            cursor = users.last?.oldSub
        }
    }

    // MARK: - Queries

    private struct StateMethod: Hashable {
        var state: String
        var method: String?
    }

    private func stateMethodCounts(_ connection: PostgresConnection) async throws -> [StateMethod: Int] {
        var counts: [StateMethod: Int] = [:]
        for row in try await ReportCounts.stateMethod(connection) {
            counts[StateMethod(state: try row.decode(String.self, at: 0), method: try row.decode(String?.self, at: 1)), default: 0] += try row.decode(Int.self, at: 2)
        }
        return counts
    }

    private func dayCounts(_ connection: PostgresConnection) async throws -> [String: MigrationReport.DayCount] {
        var days: [String: MigrationReport.DayCount] = [:]
        for row in try await ReportCounts.days(connection, now: now) {
            let day = try row.decode(String.self, at: 0)
            let count = try row.decode(Int.self, at: 2)
            var entry = days[day] ?? MigrationReport.DayCount(day: day)
            switch MigrationReport.Method(rawValue: try row.decode(String.self, at: 1)) {
            case .signin: entry.signin += count
            case .exchange: entry.exchange += count
            case .link: entry.link += count
            case nil: continue
            }
            days[day] = entry
        }
        return days
    }

    /// Migrations in the pace period: the last 7 days, or since acceptance when that is shorter.
    private func paceCount(_ connection: PostgresConnection) async throws -> (count: Int, days: Double) {
        var start = now.addingTimeInterval(-7 * 86_400)
        if let acceptedAt, acceptedAt > start { start = min(acceptedAt, now) }
        let days = max(1, now.timeIntervalSince(start) / 86_400)
        return (try await ReportCounts.migrated(connection, after: start, through: now), days)
    }

    /// The recipient's rows carrying a transfer identifier that `baton exchange` has not queued yet: pending too.
    private func unqueuedTransferColumnCount(_ connection: PostgresConnection, _ identifiers: BatonConfiguration.LegacyIdentifiers?) async throws -> Int {
        guard let query = identifiers.flatMap(LegacySeeder.unqueuedTransferColumnCount) else { return 0 }
        return try await connection.query(query)[0].decode(Int.self, at: 0)
    }

    private func reasonCounts(_ connection: PostgresConnection) async throws -> MigrationReport.Failures {
        let rows = try await ReportCounts.reasons(connection, limit: ReportBuilder.reasonLimit)
        var reasons: [MigrationReport.ReasonCount] = []
        var groups = 0
        for row in rows {
            reasons.append(MigrationReport.ReasonCount(state: try row.decode(String.self, at: 0), reason: try row.decode(String.self, at: 1), count: try row.decode(Int.self, at: 2)))
            groups = try row.decode(Int.self, at: 3)
        }
        return MigrationReport.Failures(reasons: reasons, omittedReasons: max(0, groups - reasons.count))
    }

    private func page(_ connection: PostgresConnection, after: String?, limit: Int, identifiers: BatonConfiguration.LegacyIdentifiers?) async throws -> [MigrationReport.UnresolvedUser] {
        guard limit > 0 else { return [] }
        let rows = try await connection.query(ReportBuilder.unresolvedQuery(after: after, limit: limit, identifiers: identifiers))
        return try rows.map { row in
            let email = try row.decode(String?.self, at: 5)
            return MigrationReport.UnresolvedUser(
                legacyKey: try row.decode(String?.self, at: 4),
                oldSub: try row.decode(String.self, at: 0),
                state: try row.decode(String.self, at: 1),
                step: try row.decode(Bool.self, at: 6) ? .transferIdentifiers : .exchange,
                attempts: try row.decode(Int.self, at: 2),
                lastError: try row.decode(String?.self, at: 3),
                email: email.map { emails == .masked ? ReportFormat.maskEmail($0) : $0 },
                privateRelay: email.map(ReportFormat.isPrivateRelay) ?? false
            )
        }
    }

    /// One page of users not migrated, in `old_sub` order (the transfer identifier standing in for a row known
    /// only by it), each with whether it lacks a transfer identifier (its ``MigrationReport/Step``) and its legacy
    /// row's key and email (the Apple row carrying `old_sub`, or between companies the row the transfer
    /// identifier leads to): an index scan of `transfers_unresolved_idx`. Between
    /// companies, rows of the legacy table whose transfer identifier the exchange has not queued yet are merged in
    /// as pending, by their transfer identifier.
    static func unresolvedQuery(after: String?, limit: Int, identifiers: BatonConfiguration.LegacyIdentifiers?) -> PostgresQuery {
        guard let identifiers else {
            return """
                SELECT COALESCE(t.old_sub, t.transfer_sub), t.state, t.attempts, t.last_error, NULL::text, NULL::text, t.transfer_sub IS NULL
                FROM baton.transfers AS t
                WHERE t.state <> 'migrated' AND (\(after)::text IS NULL OR COALESCE(t.old_sub, t.transfer_sub) > \(after))
                ORDER BY COALESCE(t.old_sub, t.transfer_sub)
                LIMIT \(limit)
                """
        }
        let l = identifiers
        // A row known only by its transfer identifier (between companies) is found by the transfer column, or by
        // the key `baton import transfers` recorded.
        let byTransfer: PostgresQuery = l.transferColumn.map { "u.\($0) = t.transfer_sub" } ?? "u.\(l.keyColumn)::text = t.legacy_key"
        let select = "SELECT u.\(l.keyColumn.quoted)::text AS key, \(l.emailSQL) AS email FROM \(l.table.quoted) AS u\(l.emailJoinSQL) WHERE "
        let legacyRow: PostgresQuery = """
            SELECT COALESCE(t.old_sub, t.transfer_sub), t.state, t.attempts, t.last_error, legacy.key, legacy.email, t.transfer_sub IS NULL
            FROM baton.transfers AS t
            LEFT JOIN LATERAL (
                (\(unsafeRaw: select)
            """
        let queued = legacyRow + " " + l.subjectEqualsSQL(l.storedSubjectSQL(expression: "t.old_sub")) + l.filterSQL() + " LIMIT 1) UNION ALL (\(unsafeRaw: select)t.old_sub IS NULL AND " + byTransfer + l.filterSQL() + """
             LIMIT 1) LIMIT 1) AS legacy ON true
            WHERE t.state <> 'migrated' AND (\(after)::text IS NULL OR COALESCE(t.old_sub, t.transfer_sub) > \(after))
            ORDER BY COALESCE(t.old_sub, t.transfer_sub)
            LIMIT \(limit)
            """
        guard let unqueued = LegacySeeder.unqueuedTransferColumnRows(l), let column = l.transferColumn else { return queued }
        let awaiting: PostgresQuery = """
            SELECT u.\(column)::text, 'pending'::text, 0, NULL::text, u.\(l.keyColumn)::text, \(unsafeRaw: l.emailSQL), false
            FROM \(l.table) AS u\(unsafeRaw: l.emailJoinSQL) WHERE (\(after)::text IS NULL OR u.\(column)::text > \(after))
            """
        return "SELECT * FROM ((" + queued + ") UNION ALL (" + awaiting + " AND " + unqueued + " ORDER BY 1 LIMIT \(limit))) AS unresolved ORDER BY 1 LIMIT \(limit)"
    }

    // MARK: - Derived figures

    /// Every day from the acceptance day (or the first migration's) through today, zeros included.
    private func fillDays(_ days: [String: MigrationReport.DayCount]) -> [MigrationReport.DayCount] {
        let firstData = days.keys.min()
        let acceptedDay = acceptedAt.map(ReportFormat.day)
        let candidates = [firstData, acceptedDay].compactMap { $0 }
        guard var day = candidates.min() else { return [] }
        let today = ReportFormat.day(now)
        let last = max(today, days.keys.max() ?? today)
        var filled: [MigrationReport.DayCount] = []
        while day <= last {
            filled.append(days[day] ?? MigrationReport.DayCount(day: day))
            day = ReportFormat.nextDay(day)
        }
        return filled
    }

    /// The pace over the period and the finish it leads to for the users who can still migrate, against the
    /// window's end.
    static func projection(totals: MigrationReport.Totals, window: MigrationReport.Window, migratedInPeriod: Int, periodDays: Double, now: Date) -> MigrationReport.Projection {
        let perDay = Double(migratedInPeriod) / periodDays
        let remaining = totals.migratable
        var required: Double?
        if let end = window.endsAt, end > now {
            required = Double(remaining) / (end.timeIntervalSince(now) / 86_400)
        }
        let status: MigrationReport.Projection.Status
        var finish: Date?
        if remaining == 0 {
            status = .complete
        } else if perDay <= 0 {
            status = .stalled
        } else {
            // Whole seconds, so the JSON form (ISO 8601 without fractions) reads back equal.
            let end = Date(timeIntervalSince1970: (now.timeIntervalSince1970 + Double(remaining) / perDay * 86_400).rounded())
            finish = end
            if let windowEnd = window.endsAt, end > windowEnd {
                status = .behind
            } else {
                status = .onTrack
            }
        }
        return MigrationReport.Projection(
            status: status, perDay: perDay, migratedInPeriod: migratedInPeriod, periodDays: periodDays,
            remaining: remaining, finishAt: finish, requiredPerDay: required
        )
    }
}
