@testable import Baton
@testable import BatonReport
@testable import BatonJobs
import Foundation
import Testing

/// Watching a migration over the whole 60-day window: the table's days, the page's reload, the jobs' ETA.
@Suite("Report and progress over the window")
struct ReportWindowTests {
    static let accepted = Date(timeIntervalSince1970: 1_793_491_200)  // 2026-11-01T00:00:00Z

    @Test("after a quiet fortnight the table still lists the busy first week, not fourteen rows of zeros")
    func tableListsBusyDays() {
        var report = sampleReport()
        report.perDay = (1...21).map { day in
            MigrationReport.DayCount(day: String(format: "2026-11-%02d", day), signin: day <= 7 ? 1_000 : 0, exchange: day == 3 ? 5 : 0)
        }
        let table = report.renderTable()
        #expect(table.contains("Migrations per day (UTC); 14 days without are left out"))
        #expect(table.contains("  2026-11-01    1,000         0     0  1,000"))
        #expect(table.contains("  2026-11-03    1,000         5     0  1,005"))
        #expect(table.contains("2026-11-07"))
        #expect(!table.contains("\n  2026-11-08"))
        #expect(!table.contains("\n  2026-11-21"))
        #expect(!table.contains("last 14 days"))
    }

    @Test("every day busy: no note; none at all: 'none yet'")
    func tableEdges() {
        var report = sampleReport()
        report.perDay = [MigrationReport.DayCount(day: "2026-11-02", link: 2)]
        #expect(report.renderTable().contains("Migrations per day (UTC)\n  Day "))
        report.perDay = [MigrationReport.DayCount(day: "2026-11-02")]
        #expect(report.renderTable().contains("Migrations per day (UTC); 1 day without is left out\n  none yet"))
    }

    @Test("GET /report's page reloads itself with a meta refresh; a saved page does not; both forbid fetches")
    func refresh() {
        let report = sampleReport()
        let served = report.renderHTML(refreshSeconds: 120)
        #expect(served.contains("<meta http-equiv=\"refresh\" content=\"120\">"))
        #expect(served.contains("this page reloads every 2 minutes"))
        let saved = report.renderHTML()
        #expect(!saved.contains("http-equiv=\"refresh\""))
        #expect(!saved.contains("reloads every"))
        for page in [served, saved] {
            #expect(page.contains("<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'\">"))
            #expect(!page.lowercased().contains("<script"))
        }
        #expect(ReportFormat.interval(90) == "90 seconds")
        #expect(ReportFormat.interval(3_600) == "1 hour")
    }

    @Test("report_refresh_seconds: default 300, 0 or 10...86400")
    func refreshConfiguration() throws {
        var configuration = BatonConfiguration(database: .init(url: "postgresql:///app"), apple: .init(clientIDs: ["com.example.app"]),
                                               legacy: .init(table: "public.users", keyColumn: "id", subjectColumn: "apple_sub", emailColumn: "email"))
        #expect(configuration.reportRefreshSeconds == 300)
        for valid in [0, 10, 86_400] {
            configuration.reportRefreshSeconds = valid
            #expect(throws: Never.self) { try configuration.validate() }
        }
        for invalid in [-1, 9, 86_401] {
            configuration.reportRefreshSeconds = invalid
            let error = #expect(throws: ConfigurationError.self) { try configuration.validate() }
            #expect(error?.key == "report_refresh_seconds")
        }
    }

    @Test("the progress bar says whether its ETA lands before or after day 60", arguments: [
        (49.5, 5 * 86_400, "left 5 days 0 hours, by day 55: before day 60"),
        (49.5, 50 * 86_400, "left 50 days 0 hours, by day 100: after day 60"),
        (59.9, 10 * 86_400, "left 10 days 0 hours, by day 70: after day 60"),
        (0.25, 6 * 3_600, "left 6 hours 0 minutes, by day 1: before day 60"),
    ])
    func eta(day: Double, secondsLeft: Int, expected: String) {
        // One user a second: half done after `secondsLeft`, as long again to go.
        var formatter = ProgressFormatter(total: 2 * secondsLeft, window: TransferWindow(acceptedAt: Self.accepted))
        formatter.barWidth = 4
        var counts = JobCounters.Snapshot()
        counts.succeeded = secondsLeft
        let bar = formatter.bar(counts, elapsed: Double(secondsLeft), now: Self.accepted.addingTimeInterval(day * 86_400))
        #expect(bar.hasSuffix(expected), "\(bar)")
    }

    @Test("the log line carries the ETA's day; no window, or a closed one, leaves it out")
    func etaLogLine() {
        var counts = JobCounters.Snapshot()
        counts.succeeded = 86_400
        let now = Self.accepted.addingTimeInterval(10 * 86_400)
        let open = ProgressFormatter(total: 2 * 86_400, window: TransferWindow(acceptedAt: Self.accepted))
        #expect(open.logLine(counts, elapsed: 86_400, now: now).hasSuffix("eta_s=86400 eta_day=12 eta_before_day_60=true"))
        #expect(open.landing(secondsLeft: 51 * 86_400, now: now) == .init(day: 62, beforeDeadline: false))
        #expect(open.landing(secondsLeft: 50 * 86_400, now: now) == .init(day: 60, beforeDeadline: true))
        let closed = Self.accepted.addingTimeInterval(61 * 86_400)
        #expect(open.logLine(counts, elapsed: 86_400, now: closed).hasSuffix("eta_s=86400"))
        #expect(ProgressFormatter(total: 2 * 86_400).bar(counts, elapsed: 86_400, now: now).hasSuffix("left 1 day 0 hours"))
    }
}
