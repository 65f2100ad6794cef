@testable import Baton
@testable import BatonReport
import Foundation
import BatonPostgres
import TestSupport
import Testing

/// Runs `body` with a pool on a fresh database holding Baton's schema and an application `users` table, and
/// closes the pool afterwards, whatever happens.
func withReportDatabase(_ prefix: String, _ body: (PostgresPool) async throws -> Void) async throws {
    let pool = PostgresPool(url: try TestDatabase.create(prefix), maxConnections: 2)
    try await withTeardown(pool, teardown: { await $0.close() }) { pool in
        _ = try await BatonSchema.migrator().migrate(pool)
        try await pool.withConnection { connection in
            try await connection.executeScript(unsafeSQL: "CREATE TABLE public.users (id bigserial PRIMARY KEY, apple_sub text NOT NULL UNIQUE, email text)")
        }
        try await body(pool)
    }
}

let reportLegacy = BatonConfiguration.Legacy(table: "public.users", keyColumn: "id", subjectColumn: "apple_sub", emailColumn: "email")

func reportDate(_ text: String) -> Date {
    ISO8601DateFormatter().date(from: text)!
}

@Suite("Report builder: exact figures on a hand-built dataset")
struct ReportBuilderTests {
    static let acceptedAt = reportDate("2026-11-01T00:00:00Z")
    static let now = reportDate("2026-11-11T12:00:00Z")

    /// 11 users: 5 migrated (2 sign-in, 2 exchange, 1 link), 2 pending, 2 failed, 2 unresolvable.
    static func seed(_ pool: PostgresPool) async throws {
        try await pool.withConnection { connection in
            try await connection.executeScript(unsafeSQL: """
                INSERT INTO baton.transfers (old_sub, transfer_sub, new_sub, state, method, attempts, last_error, migrated_at) VALUES
                  ('sub-m1', 'tr-m1', 'new-m1', 'migrated', 'signin',   0, NULL, '2026-11-02 10:00:00+00'),
                  ('sub-m2', 'tr-m2', 'new-m2', 'migrated', 'signin',   0, NULL, '2026-11-05 09:00:00+00'),
                  ('sub-m3', 'tr-m3', 'new-m3', 'migrated', 'exchange', 1, NULL, '2026-11-05 23:59:59+00'),
                  ('sub-m4', 'tr-m4', 'new-m4', 'migrated', 'exchange', 2, NULL, '2026-11-10 08:00:00+00'),
                  ('sub-m5', 'tr-m5', 'new-m5', 'migrated', 'link',     0, NULL, '2026-11-11 01:00:00+00'),
                  ('sub-p1', 'tr-p1', NULL, 'pending', NULL, 0, NULL, NULL),
                  ('sub-p2', 'tr-p2', NULL, 'pending', 'exchange', 1, 'Apple rate-limited the exchange', NULL),
                  ('sub-f1', 'tr-f1', NULL, 'failed', 'exchange', 3, 'Apple rejected the exchange: invalid_client', NULL),
                  ('sub-f2', 'tr-f2', NULL, 'failed', 'exchange', 3, 'Apple rejected the exchange: invalid_client', NULL),
                  ('sub-u1', 'tr-u1', NULL, 'unresolvable', 'exchange', 1, 'no user for the transfer identifier', NULL),
                  ('sub-u2', NULL, NULL, 'unresolvable', NULL, 0, NULL, NULL);
                INSERT INTO public.users (id, apple_sub, email) VALUES
                  (1, 'new-m1', 'm1@example.com'), (2, 'new-m2', NULL), (3, 'new-m3', NULL), (4, 'new-m4', NULL), (5, 'new-m5', NULL),
                  (10, 'sub-p1', 'alice@example.com'),
                  (11, 'sub-p2', 'x1y2z3@privaterelay.appleid.com'),
                  (12, 'sub-f1', 'bob@example.com'),
                  (14, 'sub-u1', NULL),
                  (15, 'sub-u2', 'carol@example.org');
                """)
        }
    }

    @Test("totals, methods, days, pace, projection, window and reasons")
    func figures() async throws {
        try await withReportDatabase("report_exact") { pool in
            try await ReportBuilderTests.seed(pool)
            let report = try await ReportBuilder(pool: pool, legacy: reportLegacy, acceptedAt: ReportBuilderTests.acceptedAt, now: ReportBuilderTests.now).build()

            #expect(report.generatedAt == ReportBuilderTests.now)
            #expect(report.totals == MigrationReport.Totals(migrated: 5, pending: 2, failed: 2, unresolvable: 2))
            #expect(report.totals.total == 11)
            #expect(report.methods == [
                MigrationReport.MethodOutcome(method: .signin, migrated: 2),
                MigrationReport.MethodOutcome(method: .exchange, migrated: 2),
                MigrationReport.MethodOutcome(method: .link, migrated: 1),
            ])
            // sub-u2 has no transfer identifier (refused at transfer-ids), sub-u1 one (refused at the exchange).
            #expect(report.refused == MigrationReport.Refused(transferIdentifiers: 1, exchange: 1, signin: 0))

            #expect(report.perDay.count == 11)
            #expect(report.perDay.first?.day == "2026-11-01")
            #expect(report.perDay.last?.day == "2026-11-11")
            let nonZero = report.perDay.filter { $0.total > 0 }
            #expect(nonZero == [
                MigrationReport.DayCount(day: "2026-11-02", signin: 1),
                MigrationReport.DayCount(day: "2026-11-05", signin: 1, exchange: 1),
                MigrationReport.DayCount(day: "2026-11-10", exchange: 1),
                MigrationReport.DayCount(day: "2026-11-11", link: 1),
            ])

            #expect(report.window.acceptedAt == ReportBuilderTests.acceptedAt)
            #expect(report.window.endsAt == reportDate("2026-12-31T00:00:00Z"))
            #expect(report.window.daysElapsed == 10)
            #expect(report.window.daysLeft == 49)
            #expect(report.window.closed == false)

            // Last 7 days: (Nov 4 12:00, Nov 11 12:00] holds m2, m3, m4, m5.
            #expect(report.projection.migratedInPeriod == 4)
            #expect(report.projection.periodDays == 7)
            #expect(abs(report.projection.perDay - 4.0 / 7) < 1e-9)
            // Pending and failed users; the two refused for good are left out.
            #expect(report.projection.remaining == 4)
            #expect(report.projection.status == .onTrack)
            #expect(report.projection.finishAt == reportDate("2026-11-18T12:00:00Z"))  // 4 / (4/7) = 7 days
            #expect(abs((report.projection.requiredPerDay ?? 0) - 4 / 49.5) < 1e-9)

            #expect(report.failures == MigrationReport.Failures(reasons: [
                MigrationReport.ReasonCount(state: "failed", reason: "Apple rejected the exchange: invalid_client", count: 2),
                MigrationReport.ReasonCount(state: "pending", reason: "Apple rate-limited the exchange", count: 1),
                MigrationReport.ReasonCount(state: "unresolvable", reason: "no error recorded", count: 1),
                MigrationReport.ReasonCount(state: "unresolvable", reason: "no user for the transfer identifier", count: 1),
            ], omittedReasons: 0))
        }
    }

    @Test("unresolved users: legacy keys, masked emails, old_sub order, every one")
    func unresolvedMasked() async throws {
        try await withReportDatabase("report_unresolved") { pool in
            try await ReportBuilderTests.seed(pool)
            let report = try await ReportBuilder(pool: pool, legacy: reportLegacy, acceptedAt: ReportBuilderTests.acceptedAt, now: ReportBuilderTests.now).build()
            #expect(report.unresolved.total == 6)
            #expect(report.unresolved.nextAfter == nil)
            #expect(report.unresolved.users == [
                MigrationReport.UnresolvedUser(legacyKey: "12", oldSub: "sub-f1", state: "failed", step: .exchange, attempts: 3, lastError: "Apple rejected the exchange: invalid_client", email: "b***@example.com", privateRelay: false),
                MigrationReport.UnresolvedUser(legacyKey: nil, oldSub: "sub-f2", state: "failed", step: .exchange, attempts: 3, lastError: "Apple rejected the exchange: invalid_client", email: nil, privateRelay: false),
                MigrationReport.UnresolvedUser(legacyKey: "10", oldSub: "sub-p1", state: "pending", step: .exchange, attempts: 0, lastError: nil, email: "a***@example.com", privateRelay: false),
                MigrationReport.UnresolvedUser(legacyKey: "11", oldSub: "sub-p2", state: "pending", step: .exchange, attempts: 1, lastError: "Apple rate-limited the exchange", email: "x***@privaterelay.appleid.com", privateRelay: true),
                MigrationReport.UnresolvedUser(legacyKey: "14", oldSub: "sub-u1", state: "unresolvable", step: .exchange, attempts: 1, lastError: "no user for the transfer identifier", email: nil, privateRelay: false),
                MigrationReport.UnresolvedUser(legacyKey: "15", oldSub: "sub-u2", state: "unresolvable", step: .transferIdentifiers, attempts: 0, lastError: nil, email: "c***@example.org", privateRelay: false),
            ])
        }
    }

    @Test("pages: limit, nextAfter, after; the streamed list; unmasked; no legacy table")
    func paging() async throws {
        try await withReportDatabase("report_pages") { pool in
            try await ReportBuilderTests.seed(pool)
            let first = try await ReportBuilder(pool: pool, legacy: reportLegacy, acceptedAt: nil, now: ReportBuilderTests.now, limit: 4).build()
            #expect(first.unresolved.users.map(\.oldSub) == ["sub-f1", "sub-f2", "sub-p1", "sub-p2"])
            #expect(first.unresolved.nextAfter == "sub-p2")
            let second = try await ReportBuilder(pool: pool, legacy: reportLegacy, acceptedAt: nil, now: ReportBuilderTests.now, limit: 4, after: "sub-p2").build()
            #expect(second.unresolved.users.map(\.oldSub) == ["sub-u1", "sub-u2"])
            #expect(second.unresolved.nextAfter == nil)
            let exact = try await ReportBuilder(pool: pool, legacy: reportLegacy, acceptedAt: nil, now: ReportBuilderTests.now, limit: 6).build()
            #expect(exact.unresolved.users.count == 6)
            #expect(exact.unresolved.nextAfter == nil)
            let none = try await ReportBuilder(pool: pool, legacy: reportLegacy, acceptedAt: nil, now: ReportBuilderTests.now, limit: 0).build()
            #expect(none.unresolved.users.isEmpty)
            #expect(none.unresolved.total == 6)

            var pages: [[String]] = []
            try await ReportBuilder(pool: pool, legacy: reportLegacy, acceptedAt: nil, emails: .unmasked).forEachUnresolvedPage(pageSize: 4) { users in
                pages.append(users.map { $0.email ?? "-" })
            }
            #expect(pages == [["bob@example.com", "-", "alice@example.com", "x1y2z3@privaterelay.appleid.com"], ["-", "carol@example.org"]])
            var limited: [String] = []
            try await ReportBuilder(pool: pool, legacy: reportLegacy, acceptedAt: nil).forEachUnresolvedPage(pageSize: 2, limit: 3) { users in
                limited += users.map(\.oldSub)
            }
            #expect(limited == ["sub-f1", "sub-f2", "sub-p1"])

            let bare = try await ReportBuilder(pool: pool, legacy: nil, acceptedAt: nil, now: ReportBuilderTests.now).build()
            #expect(bare.unresolved.users.allSatisfy { $0.legacyKey == nil && $0.email == nil })
            #expect(bare.window == MigrationReport.Window(acceptedAt: nil, now: ReportBuilderTests.now))
            #expect(bare.window.daysLeft == nil)
            // Without acceptance the days start at the first migration.
            #expect(bare.perDay.first?.day == "2026-11-02")
        }
    }

    @Test("an empty table: zeros, an empty day list, complete")
    func empty() async throws {
        try await withReportDatabase("report_empty") { pool in
            let report = try await ReportBuilder(pool: pool, legacy: reportLegacy, acceptedAt: nil, now: ReportBuilderTests.now).build()
            #expect(report.totals.total == 0)
            #expect(report.perDay.isEmpty)
            #expect(report.projection.status == .complete)
            #expect(report.unresolved.users.isEmpty)
            #expect(report.failures.reasons.isEmpty)
        }
    }

    @Test("invalid legacy identifiers are refused before any query", arguments: [
        BatonConfiguration.Legacy(table: "users; DROP TABLE x", keyColumn: "id", subjectColumn: "apple_sub", emailColumn: "email"),
        BatonConfiguration.Legacy(table: "users", keyColumn: "id\"", subjectColumn: "apple_sub", emailColumn: "email"),
        BatonConfiguration.Legacy(table: "users", keyColumn: "id", subjectColumn: "public.apple_sub", emailColumn: "email"),
        BatonConfiguration.Legacy(table: "users", keyColumn: "id", subjectColumn: "apple_sub", emailColumn: "1email"),
    ])
    func invalidLegacy(legacy: BatonConfiguration.Legacy) async throws {
        let pool = PostgresPool(url: "postgresql:///nowhere?host=/nonexistent")
        await #expect(throws: ConfigurationError.self) {
            try await ReportBuilder(pool: pool, legacy: legacy, acceptedAt: nil).build()
        }
    }

    @Test("a legacy column that does not exist fails with a database error")
    func missingColumn() async throws {
        try await withReportDatabase("report_column") { pool in
            try await ReportBuilderTests.seed(pool)
            let legacy = BatonConfiguration.Legacy(table: "public.users", keyColumn: "id", subjectColumn: "apple_sub", emailColumn: "mail")
            await #expect(throws: PostgresError.self) {
                try await ReportBuilder(pool: pool, legacy: legacy, acceptedAt: nil).build()
            }
        }
    }
}

@Suite("Report builder: 100,000 transfers")
struct ReportLargeTests {
    @Test("figures from generate_series, one page read, the unresolved page uses the partial index")
    func large() async throws {
        try await withReportDatabase("report_large") { pool in
            // 100,000 users: i % 10 < 6 migrated (by method i % 3), 7 pending, 8 failed, 9 unresolvable.
            try await pool.withConnection { connection in
                try await connection.executeScript(unsafeSQL: """
                    INSERT INTO baton.transfers (old_sub, new_sub, state, method, last_error, migrated_at)
                    SELECT 'old-' || lpad(i::text, 6, '0'),
                           CASE WHEN i % 10 < 6 THEN 'new-' || i END,
                           CASE WHEN i % 10 < 6 THEN 'migrated' WHEN i % 10 = 7 THEN 'pending' WHEN i % 10 = 8 THEN 'failed' ELSE 'unresolvable' END,
                           CASE WHEN i % 10 < 6 THEN (ARRAY['signin', 'exchange', 'link'])[i % 3 + 1] END,
                           CASE WHEN i % 10 = 8 THEN 'error ' || ((i / 10) % 4) END,
                           CASE WHEN i % 10 < 6 THEN timestamptz '2026-11-01 00:00:00+00' + (i % 20) * interval '1 day' + interval '1 hour' END
                    FROM generate_series(1, 100000) AS i
                    WHERE i % 10 <> 6;
                    INSERT INTO public.users (apple_sub, email)
                    SELECT COALESCE(new_sub, old_sub), 'u' || old_sub || '@example.com' FROM baton.transfers;
                    ANALYZE baton.transfers;
                    ANALYZE public.users;
                    """)
            }
            let now = reportDate("2026-11-25T00:00:00Z")
            let report = try await ReportBuilder(pool: pool, legacy: reportLegacy, acceptedAt: reportDate("2026-11-01T00:00:00Z"), now: now).build()
            // 100,000 minus the 10,000 with i % 10 == 6: 60,000 migrated, 10,000 of each other state.
            #expect(report.totals == MigrationReport.Totals(migrated: 60_000, pending: 10_000, failed: 10_000, unresolvable: 10_000))
            #expect(report.methods.map(\.migrated).reduce(0, +) == 60_000)
            #expect(report.perDay.map(\.total).reduce(0, +) == 60_000)
            #expect(report.perDay.count == 25)  // Nov 1 ... Nov 25
            #expect(report.failures.reasons.filter { $0.state == "failed" }.map(\.count).reduce(0, +) == 10_000)
            #expect(report.failures.reasons.count == 5)  // error 0...3, and unresolvable without an error
            #expect(report.unresolved.total == 30_000)
            #expect(report.unresolved.users.count == ReportBuilder.defaultLimit)
            #expect(report.unresolved.users.first?.oldSub == "old-000007")
            #expect(report.unresolved.users.first?.legacyKey != nil)

            let query = ReportBuilder.unresolvedQuery(after: "old-050000", limit: 101, identifiers: try reportLegacy.identifiers())
            let plan = try await pool.query(PostgresQuery(unsafeSQL: "EXPLAIN " + query.sql, query.bindings))
            let text = try plan.map { try $0.decode(String.self, at: 0) }.joined(separator: "\n")
            #expect(text.contains("transfers_unresolved_idx"))
            #expect(text.contains("users_apple_sub_key"))
        }
    }
}
