import Baton
import Foundation
import BatonLogging

/// Number, date and email formatting shared by the report's renderings: fixed, locale-independent output
/// (UTC, `,` between thousands), so tests and scripts can rely on it.
package enum ReportFormat {
    /// `j***@example.com`: the first character and the domain (idempotent).
    static func maskEmail(_ email: String) -> String {
        Logger.maskEmail(email)
    }

    /// Whether `email` is an Apple private relay address.
    static func isPrivateRelay(_ email: String) -> Bool {
        email.lowercased().hasSuffix("@privaterelay.appleid.com")
    }

    private static func utc(_ date: Date) -> tm {
        var time = time_t(date.timeIntervalSince1970.rounded(.down))
        var parts = tm()
        gmtime_r(&time, &parts)
        return parts
    }

    /// `2026-11-29`, the UTC day of `date`.
    static func day(_ date: Date) -> String {
        let parts = utc(date)
        return String(format: "%04d-%02d-%02d", Int(parts.tm_year) + 1900, Int(parts.tm_mon) + 1, Int(parts.tm_mday))
    }

    /// `2026-11-29 17:38 UTC`.
    static func timestamp(_ date: Date) -> String {
        let parts = utc(date)
        return day(date) + String(format: " %02d:%02d UTC", Int(parts.tm_hour), Int(parts.tm_min))
    }

    /// The day after a `YYYY-MM-DD` day.
    static func nextDay(_ day: String) -> String {
        self.day(date(ofDay: day).addingTimeInterval(86_400))
    }

    /// Midnight UTC of a `YYYY-MM-DD` day (the epoch for a malformed one).
    static func date(ofDay day: String) -> Date {
        let numbers = day.split(separator: "-").compactMap { Int($0) }
        guard numbers.count == 3 else { return Date(timeIntervalSince1970: 0) }
        var parts = tm()
        parts.tm_year = Int32(numbers[0] - 1900)
        parts.tm_mon = Int32(numbers[1] - 1)
        parts.tm_mday = Int32(numbers[2])
        return Date(timeIntervalSince1970: TimeInterval(timegm(&parts)))
    }

    /// `100,000` (also the demo's figures).
    package static func count(_ value: Int) -> String {
        let digits = String(value.magnitude)
        var grouped = ""
        for (index, digit) in digits.enumerated() {
            if index > 0, (digits.count - index) % 3 == 0 { grouped.append(",") }
            grouped.append(digit)
        }
        return value < 0 ? "-" + grouped : grouped
    }

    /// `1,234`, `60`, `0.6`: whole numbers from 100 up or when whole, one decimal otherwise.
    static func rate(_ value: Double) -> String {
        guard value.isFinite, value > 0 else { return "0" }
        if value >= 100 || value == value.rounded() { return count(Int(value.rounded())) }
        return String(format: "%.1f", value)
    }

    /// `7` for whole days, `2.5` otherwise.
    static func days(_ value: Double) -> String {
        guard value.isFinite else { return "0" }
        return value == value.rounded() ? String(Int(value)) : String(format: "%.1f", value)
    }

    /// `5 minutes`, `1 hour`, `90 seconds`: a whole number of seconds in its largest exact unit.
    static func interval(_ seconds: Int) -> String {
        func unit(_ n: Int, _ name: String) -> String { "\(count(n)) \(name)\(n == 1 ? "" : "s")" }
        if seconds % 3600 == 0 { return unit(seconds / 3600, "hour") }
        if seconds % 60 == 0 { return unit(seconds / 60, "minute") }
        return unit(seconds, "second")
    }

    /// `52.3%`.
    static func percent(_ fraction: Double) -> String {
        guard fraction.isFinite else { return "0.0%" }
        return String(format: "%.1f%%", fraction * 100)
    }
}

extension MigrationReport {
    /// One or two sentences on the pace and where it leads for the users who can still migrate, e.g.
    /// `Not at the current pace: …`; the users refused for good are named apart.
    public var projectionSummary: String {
        let p = projection
        let pace = "\(ReportFormat.rate(p.perDay)) migrations/day over the last \(ReportFormat.days(p.periodDays)) days"
        let required = p.requiredPerDay.map { " Finishing by the deadline takes \(ReportFormat.rate($0))/day." } ?? ""
        let refusedNote = totals.unresolvable == 0 ? "" : " \(ReportFormat.count(totals.unresolvable)) users refused for good are left out (see Refused, by step)."
        let closed = window.endsAt.map { "The window closed on \(ReportFormat.timestamp($0)) with \(ReportFormat.count(totals.unresolved)) users not migrated: reach them with a re-sign-in campaign (CSV)." }
        switch p.status {
        case .complete:
            if totals.unresolvable > 0 {
                return "Every user who can still migrate is migrated; \(ReportFormat.count(totals.unresolvable)) users were refused for good (see Refused, by step)."
            }
            return "Every user is migrated."
        case .stalled:
            if window.closed, let closed { return closed }
            return "No migration in the last \(ReportFormat.days(p.periodDays)) days: no finish at the current pace; \(ReportFormat.count(p.remaining)) users can still migrate.\(required)\(refusedNote)"
        case .onTrack:
            let finish = p.finishAt.map(ReportFormat.timestamp) ?? "-"
            if let end = window.endsAt {
                return "On track: at \(pace), the last \(ReportFormat.count(p.remaining)) users migrate by \(finish), before the window closes on \(ReportFormat.timestamp(end)).\(refusedNote)"
            }
            return "At \(pace), the last \(ReportFormat.count(p.remaining)) users migrate by \(finish) (no acceptance date configured, so no deadline).\(refusedNote)"
        case .behind:
            if window.closed, let closed { return closed }
            let end = window.endsAt.map(ReportFormat.timestamp) ?? "-"
            let finish = p.finishAt.map(ReportFormat.timestamp) ?? "-"
            return "Not at the current pace: at \(pace), the last \(ReportFormat.count(p.remaining)) users would migrate by \(finish), after the window closes on \(end).\(required)\(refusedNote)"
        }
    }
}
