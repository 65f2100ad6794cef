import BatonEmulator
@testable import Baton
@testable import BatonReport
@testable import BatonJobs
import Foundation
import BatonPostgres
import TestSupport
import Testing

/// The report's figures from the counts kept as rows change (schema 0013) against the `GROUP BY` queries over
/// `baton.transfers` the report ran before, after each step of a mixed workload through the real writers.
@Suite("Report counts: kept by the trigger, equal to counting the table", .serialized)
struct ReportCountsTests {
    /// The figures the counts stand in for, counted from `baton.transfers` itself.
    struct Direct: Equatable {
        var totals: MigrationReport.Totals
        var methods: [MigrationReport.MethodOutcome]
        var days: [MigrationReport.DayCount]
        var pace: Int
        var reasons: [MigrationReport.ReasonCount]
        /// The refused users by step: without a transfer identifier, with one.
        var refused: [Int]

        init(_ pool: PostgresPool, now: Date, paceStart: Date) async throws {
            var counts: [String: Int] = [:]
            for row in try await pool.query("SELECT state, COALESCE(method, '-'), count(*) FROM baton.transfers GROUP BY 1, 2") {
                counts[try row.decode(String.self, at: 0) + "/" + row.decode(String.self, at: 1)] = try row.decode(Int.self, at: 2)
            }
            let byState = { (state: String) in counts.filter { $0.key.hasPrefix(state + "/") }.reduce(0) { $0 + $1.value } }
            let unmatched = try await pool.query("""
                SELECT count(DISTINCT e.transfer_sub) FROM baton.events AS e
                WHERE e.kind = 'unmatched'
                  AND NOT EXISTS (SELECT 1 FROM baton.transfers AS t WHERE t.transfer_sub = e.transfer_sub AND t.state = 'migrated')
                """)[0].decode(Int.self, at: 0)
            totals = MigrationReport.Totals(migrated: byState("migrated"), pending: byState("pending"), failed: byState("failed"),
                                            unresolvable: byState("unresolvable"), unmatchedSignins: unmatched)
            methods = MigrationReport.Method.allCases.map { method in
                MigrationReport.MethodOutcome(method: method, migrated: counts["migrated/\(method.rawValue)"] ?? 0)
            }
            days = try await pool.query("""
                SELECT to_char(migrated_at AT TIME ZONE 'UTC', 'YYYY-MM-DD'),
                       count(*) FILTER (WHERE method = 'signin'), count(*) FILTER (WHERE method = 'exchange'), count(*) FILTER (WHERE method = 'link')
                FROM baton.transfers WHERE state = 'migrated' AND migrated_at <= \(now) GROUP BY 1 ORDER BY 1
                """).map { row in
                MigrationReport.DayCount(day: try row.decode(String.self, at: 0), signin: try row.decode(Int.self, at: 1),
                                         exchange: try row.decode(Int.self, at: 2), link: try row.decode(Int.self, at: 3))
            }
            pace = try await pool.query("""
                SELECT count(*) FROM baton.transfers WHERE state = 'migrated' AND migrated_at > \(paceStart) AND migrated_at <= \(now)
                """)[0].decode(Int.self, at: 0)
            reasons = try await pool.query("""
                SELECT state, COALESCE(left(last_error, 200), 'no error recorded') AS reason, count(*) AS n
                FROM baton.transfers
                WHERE state IN ('failed', 'unresolvable') OR (state = 'pending' AND last_error IS NOT NULL)
                GROUP BY 1, 2 ORDER BY n DESC, state, reason LIMIT \(ReportBuilder.reasonLimit)
                """).map { row in
                MigrationReport.ReasonCount(state: try row.decode(String.self, at: 0), reason: try row.decode(String.self, at: 1), count: try row.decode(Int.self, at: 2))
            }
            refused = try await pool.query("SELECT transfer_sub IS NULL, count(*) FROM baton.transfers WHERE state = 'unresolvable' GROUP BY 1 ORDER BY 1 DESC")
                .reduce(into: [0, 0]) { counts, row in counts[try row.decode(Bool.self, at: 0) ? 0 : 1] = try row.decode(Int.self, at: 1) }
        }

        init(_ report: MigrationReport) {
            totals = report.totals
            methods = report.methods
            days = report.perDay.filter { $0.total > 0 }
            pace = report.projection.migratedInPeriod
            reasons = report.failures.reasons
            refused = [report.refused.transferIdentifiers, report.refused.exchange]
        }
    }

    /// Builds the report at several instants (now, in the middle of past hours, with a pace period starting mid-hour)
    /// and expects each to equal the direct counts; then no delta is left.
    static func expectExact(_ fixture: BulkJobFixture, _ step: Comment) async throws {
        let pool = fixture.database.pool
        // Instants amid the migrations, so that some of the same hour come after them.
        let amid = try await pool.query("""
            SELECT percentile_disc(0.3) WITHIN GROUP (ORDER BY migrated_at), percentile_disc(0.6) WITHIN GROUP (ORDER BY migrated_at)
            FROM baton.transfers WHERE state = 'migrated'
            """)[0]
        let instants = [try amid.decode(Date?.self, at: 0).map { ($0, $0.addingTimeInterval(-1)) },
                        try amid.decode(Date?.self, at: 1).map { ($0, $0.addingTimeInterval(-2_000)) }].compactMap { $0 }
        for (now, acceptedAt) in instants.map { ($0.0, Optional($0.1)) } + [(Date(), nil), (Date().addingTimeInterval(-5_400), nil), (Date(), Date().addingTimeInterval(-2.3 * 3_600)),
                                  (Date().addingTimeInterval(-86_400 * 3 - 1_234.5), Date().addingTimeInterval(-86_400 * 5 - 77))] as [(Date, Date?)] {
            let report = try await ReportBuilder(pool: pool, legacy: nil, acceptedAt: acceptedAt, now: now).build()
            var paceStart = now.addingTimeInterval(-7 * 86_400)
            if let acceptedAt, acceptedAt > paceStart { paceStart = min(acceptedAt, now) }
            let direct = try await Direct(pool, now: now, paceStart: paceStart)
            #expect(Direct(report) == direct, step)
            #expect(report.totals.total > 0, step)
        }
        #expect(try fixture.count("SELECT count(*) FROM baton.transfer_count_deltas") == 0, step)
    }

    @Test("sign-ins, exchange with failures, import, moved times, a rollback, deletes: the report equals the GROUP BY after each")
    func mixedWorkload() async throws {
        try await BulkJobFixture.run(users: 30) { fixture in
            let pool = fixture.database.pool
            let store = fixture.database.store
            try await Self.expectExact(fixture, "seeded")

            // Sign-ins migrate a third; one of them twice (current), one unknown transfer identifier (unmatched).
            let signingIn = Array(fixture.transfers.sorted { $0.key < $1.key }.prefix(10))
            for (index, (_, transferSub)) in signingIn.enumerated() {
                _ = try await store.applyMigration(transferSub: transferSub, newSub: "new-signin-\(index)", newEmail: nil, isPrivateEmail: nil, method: .signin)
            }
            _ = try await store.applyMigration(transferSub: signingIn[0].value, newSub: "new-signin-0", newEmail: nil, isPrivateEmail: nil, method: .signin)
            try await store.recordUnmatched(transferSub: "tr-unknown", sub: "sub-unknown")
            #expect(try fixture.count("SELECT count(*) FROM baton.transfer_count_deltas") > 0)
            try await Self.expectExact(fixture, "after sign-ins")

            // Rows Apple knows nothing of: the exchange fails them; the rest are exchanged.
            try await pool.execute("""
                INSERT INTO baton.transfers (old_sub, transfer_sub)
                SELECT 'old-bogus-' || i, 'tr-bogus-' || i FROM generate_series(1, 4) AS i
                """)
            let job = try fixture.exchangeJob(options: BulkJobOptions(workers: 3, rate: 500))
            let summary = await job.run()
            #expect(summary.counts.succeeded == 20)
            #expect(try fixture.count("SELECT count(*) FROM baton.transfers WHERE state IN ('failed', 'unresolvable')") == 4)
            try await Self.expectExact(fixture, "after the exchange")

            // An import of new pairs, then migrations moved across hours and days, and an error on a pending row.
            let file = FileManager.default.temporaryDirectory.appendingPathComponent("report-counts-\(UUID().uuidString).csv")
            defer { try? FileManager.default.removeItem(at: file) }
            let lines = (1...6).map { "old-imported-\($0),tr-imported-\($0)" }
            try (["old_sub,transfer_sub"] + lines).joined(separator: "\n").write(to: file, atomically: true, encoding: .utf8)
            let imported = try await TransferImporter(pool: pool).importFile(path: file.path) { _ in }
            #expect(imported.loaded == 6)
            try await pool.execute("UPDATE baton.transfers SET migrated_at = migrated_at - (id % 13) * interval '397 minutes' WHERE state = 'migrated'")
            try await pool.execute("UPDATE baton.transfers SET last_error = 'Apple rate-limited the exchange', attempts = 1 WHERE old_sub = 'old-imported-1'")
            // A lease alone changes no count.
            let before = try fixture.count("SELECT count(*) FROM baton.transfer_count_deltas")
            try await pool.execute("UPDATE baton.transfers SET lease_owner = 'worker', lease_expires_at = now() + interval '1 minute' WHERE state = 'pending'")
            #expect(try fixture.count("SELECT count(*) FROM baton.transfer_count_deltas") == before)
            try await Self.expectExact(fixture, "after the import and moved times")

            // The runbook's rollback of one rewrite, then a delete and a truncate-free cleanup of the bogus rows.
            try await pool.execute("""
                WITH e AS (SELECT * FROM baton.events WHERE kind = 'migrated' AND method = 'signin' ORDER BY id LIMIT 1),
                restored AS (
                    UPDATE public.users AS u SET apple_sub = e.old_sub FROM e WHERE u.id::text = e.legacy_key AND u.apple_sub = e.new_sub RETURNING u.id
                ), reopened AS (
                    UPDATE baton.transfers AS t
                       SET state = 'pending', method = NULL, new_sub = NULL, new_email = NULL, is_private_email = NULL,
                           migrated_at = NULL, attempts = 0, next_attempt_at = NULL, last_error = 'rolled back', updated_at = now()
                      FROM e, restored WHERE t.old_sub = e.old_sub RETURNING t.old_sub
                )
                INSERT INTO baton.events (kind, method, legacy_key, old_sub, new_sub, transfer_sub)
                SELECT 'rolled_back', e.method, e.legacy_key, e.new_sub, e.old_sub, e.transfer_sub FROM e, restored
                """)
            #expect(try fixture.count("SELECT count(*) FROM baton.transfers WHERE last_error = 'rolled back'") == 1)
            try await pool.execute("DELETE FROM baton.transfers WHERE old_sub LIKE 'old-bogus-%' AND transfer_sub <> 'tr-bogus-1'")
            try await Self.expectExact(fixture, "after a rollback and deletes")
        }
    }

    @Test("schema 0013 counts the rows already there; deltas beyond one fold's chunk are folded in several")
    func seedingAndChunks() async throws {
        let url = try TestDatabase.create("report_counts_seed")
        let pool = PostgresPool(url: url, maxConnections: 2)
        try await withTeardown(pool, teardown: { await $0.close() }) { pool in
            let migrator = try BatonSchema.migrator()
            try await Migrator(migrations: migrator.migrations.filter { $0.version < 13 }, schema: migrator.schema, lockKey: migrator.lockKey).migrate(pool)
            try await pool.execute("""
                INSERT INTO baton.transfers (old_sub, transfer_sub, new_sub, state, method, migrated_at, last_error)
                SELECT 'old-' || i, 'tr-' || i, CASE WHEN i % 3 = 0 THEN 'new-' || i END,
                       CASE i % 3 WHEN 0 THEN 'migrated' WHEN 1 THEN 'pending' ELSE 'failed' END,
                       CASE WHEN i % 3 = 0 THEN 'exchange' END,
                       CASE WHEN i % 3 = 0 THEN now() - i * interval '7 minutes' END,
                       CASE WHEN i % 3 = 2 THEN 'error ' || (i % 5) END
                FROM generate_series(1, 3000) AS i
                """)
            try await migrator.migrate(pool)
            #expect(Int(try TestDatabase.psql(url, "SELECT sum(count) FROM baton.transfer_counts")) == 3000)

            // Twice one fold's chunk of deltas that cancel out, besides a real change.
            try await pool.execute("""
                INSERT INTO baton.transfer_count_deltas
                SELECT 'pending', NULL, NULL, NULL, CASE WHEN i % 2 = 0 THEN 1 ELSE -1 END FROM generate_series(1, \(2 * ReportCounts.foldChunk)) AS i
                """)
            try await pool.execute("UPDATE baton.transfers SET state = 'unresolvable', last_error = NULL WHERE old_sub = 'old-1'")
            let now = Date()
            let report = try await ReportBuilder(pool: pool, legacy: nil, acceptedAt: now.addingTimeInterval(-86_400 * 2.5), now: now).build()
            let direct = try await Direct(pool, now: now, paceStart: now.addingTimeInterval(-86_400 * 2.5))
            #expect(Direct(report) == direct)
            #expect(report.totals == MigrationReport.Totals(migrated: 1000, pending: 999, failed: 1000, unresolvable: 1))
            #expect(try TestDatabase.psql(url, "SELECT count(*) FROM baton.transfer_count_deltas") == "0")
        }
    }
}
