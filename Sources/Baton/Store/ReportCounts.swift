import Foundation
import BatonPostgres

/// The report's counts of `baton.transfers` by state, method, hour of migration and failure reason, kept as rows
/// change (schema 0013): every statement that writes the table appends its changes by group to
/// `baton.transfer_count_deltas`, which ``fold(_:)`` moves into `baton.transfer_counts`; the view
/// `baton.transfer_count_totals` adds both up, so the report reads a few thousand rows however many users there
/// are. Migrations at the edges of a period (after `now` in its hour, before the pace period's start in its hour) are
/// counted from the table itself (the index of 0012), so the figures are exactly those of a `GROUP BY` over the
/// table, at any `now`.
package enum ReportCounts {
    /// The advisory lock that lets one report at a time fold ("report" in ASCII).
    static let foldLockKey: Int64 = 0x7265_706F_7274
    /// Deltas moved per statement, so each stays well under a statement timeout however many have piled up.
    static let foldChunk = 50_000

    /// Moves the appended deltas into the summary, `foldChunk` at a time, each chunk in its own short transaction.
    /// Does nothing where the database cannot be written (a read replica: the view still counts every delta) or
    /// while another report folds.
    package static func fold(_ connection: PostgresConnection) async throws {
        while try await connection.withTransaction({ connection in
            let mayFold = try await connection.query("""
                SELECT current_setting('transaction_read_only') = 'off' AND pg_try_advisory_xact_lock(\(foldLockKey))
                """)[0].decode(Bool.self, at: 0)
            guard mayFold else { return false }
            return try await connection.query("""
                WITH folded AS (
                    DELETE FROM baton.transfer_count_deltas
                    WHERE ctid = ANY (ARRAY(SELECT ctid FROM baton.transfer_count_deltas LIMIT \(foldChunk)))
                    RETURNING *
                ), replaced AS (
                    DELETE FROM baton.transfer_counts AS c
                    USING (SELECT DISTINCT state, method, migrated_hour, reason FROM folded) AS f
                    WHERE c.state = f.state AND c.method IS NOT DISTINCT FROM f.method
                      AND c.migrated_hour IS NOT DISTINCT FROM f.migrated_hour AND c.reason IS NOT DISTINCT FROM f.reason
                    RETURNING c.*
                ), summed AS (
                    INSERT INTO baton.transfer_counts
                    SELECT state, method, migrated_hour, reason, sum(count)
                    FROM (SELECT * FROM folded UNION ALL SELECT * FROM replaced) AS both_parts
                    GROUP BY 1, 2, 3, 4
                    HAVING sum(count) <> 0
                )
                SELECT count(*) FROM folded
                """)[0].decode(Int.self, at: 0) == foldChunk
        }) {}
    }

    /// Rows by state and method.
    package static func stateMethod(_ connection: PostgresConnection) async throws -> PostgresResult {
        try await connection.query("SELECT state, method, sum(count)::bigint FROM baton.transfer_count_totals GROUP BY state, method")
    }

    /// The `unresolvable` users by the step that refused them: without a transfer identifier `baton transfer-ids`,
    /// with one `baton exchange`. Counted from the table through the index of 0012 (whose first column is the
    /// state), so the work grows with the refused users only.
    package static func refused(_ connection: PostgresConnection) async throws -> (transferIdentifiers: Int, exchange: Int) {
        let row = try await connection.query("""
            SELECT count(*) FILTER (WHERE transfer_sub IS NULL), count(*) FILTER (WHERE transfer_sub IS NOT NULL)
            FROM baton.transfers WHERE state = 'unresolvable'
            """)[0]
        return (try row.decode(Int.self, at: 0), try row.decode(Int.self, at: 1))
    }

    /// Migrations up to `now` by UTC day (`YYYY-MM-DD`) and method; a day may come in several rows. The counts
    /// through `now`'s hour, less the migrations of that hour after `now` (none, unless `now` is in the past or the
    /// clocks disagree).
    package static func days(_ connection: PostgresConnection, now: Date) async throws -> PostgresResult {
        let hourAfter = startOfHour(now).addingTimeInterval(3_600)
        return try await connection.query("""
            SELECT to_char(migrated_hour AT TIME ZONE 'UTC', 'YYYY-MM-DD'), method, sum(count)::bigint
            FROM baton.transfer_count_totals
            WHERE state = 'migrated' AND migrated_hour < \(hourAfter)
            GROUP BY 1, 2
            UNION ALL
            SELECT to_char(migrated_at AT TIME ZONE 'UTC', 'YYYY-MM-DD'), method, -count(*)
            FROM baton.transfers
            WHERE state = 'migrated' AND migrated_at > \(now) AND migrated_at < \(hourAfter)
            GROUP BY 1, 2
            """)
    }

    /// Migrations after `start` and up to `now`: the counts of the hours from the one after `start`'s through
    /// `now`'s, with the migrations of `start`'s hour after `start` and less those of `now`'s hour after `now`,
    /// both from the table.
    package static func migrated(_ connection: PostgresConnection, after start: Date, through now: Date) async throws -> Int {
        let firstWholeHour = startOfHour(start).addingTimeInterval(3_600)
        let hourAfter = startOfHour(now).addingTimeInterval(3_600)
        return try await connection.query("""
            SELECT (SELECT COALESCE(sum(count), 0)::bigint FROM baton.transfer_count_totals
                    WHERE state = 'migrated' AND migrated_hour >= \(firstWholeHour) AND migrated_hour < \(hourAfter))
                 + (SELECT count(*) FROM baton.transfers
                    WHERE state = 'migrated' AND migrated_at > \(start) AND migrated_at <= \(now) AND migrated_at < \(firstWholeHour))
                 - (SELECT count(*) FROM baton.transfers
                    WHERE state = 'migrated' AND migrated_at > \(now) AND migrated_at < \(hourAfter) AND migrated_at >= \(firstWholeHour))
            """)[0].decode(Int.self, at: 0)
    }

    /// The failure reasons by state, most frequent first, at most `limit`, each row with the number of groups.
    package static func reasons(_ connection: PostgresConnection, limit: Int) async throws -> PostgresResult {
        try await connection.query("""
            SELECT state, reason, n, count(*) OVER () AS groups
            FROM (
                SELECT state, reason, sum(count)::bigint AS n
                FROM baton.transfer_count_totals
                WHERE reason IS NOT NULL
                GROUP BY 1, 2
            ) AS grouped
            ORDER BY n DESC, state, reason
            LIMIT \(limit)
            """)
    }

    /// The start of `date`'s UTC hour (0013 groups migrations by it).
    static func startOfHour(_ date: Date) -> Date {
        Date(timeIntervalSince1970: (date.timeIntervalSince1970 / 3_600).rounded(.down) * 3_600)
    }
}
