import Baton
import Foundation

extension MigrationReport {
    /// The CSV header: `legacy_key,old_sub,state,attempts,last_error,email,private_relay,step`.
    public static let csvHeader = "legacy_key,old_sub,state,attempts,last_error,email,private_relay,step"

    /// One CSV line (RFC 4180 quoting, no line break) for `user`, in the order of ``csvHeader``.
    public static func csvLine(_ user: UnresolvedUser) -> String {
        [
            user.legacyKey ?? "",
            user.oldSub,
            user.state,
            String(user.attempts),
            user.lastError ?? "",
            user.email ?? "",
            user.privateRelay ? "true" : "false",
            user.step.rawValue,
        ].map(csvField).joined(separator: ",")
    }

    /// The unresolved users listed in this report as CSV, header first, lines ending in CRLF, then the duplicates
    /// section when there are any (``duplicatesCSV(_:)``).
    ///
    /// Emails are as the builder produced them: masked unless it was built with `emails: .unmasked`.
    /// For every user of a large table, write ``csvHeader`` and then ``csvLine(_:)`` for each user of
    /// ``ReportBuilder/forEachUnresolvedPage(pageSize:_:)``, as `baton report --format csv` does.
    public func renderCSV() -> String {
        var text = MigrationReport.csvHeader + "\r\n"
        for user in unresolved.users {
            text += MigrationReport.csvLine(user) + "\r\n"
        }
        return text + MigrationReport.duplicatesCSV(duplicates)
    }

    /// Quotes a field per RFC 4180. A field a spreadsheet would run as a formula (starting with `=`,
    /// `+`, `-`, `@`, tab or CR) gets a leading `'`, so a crafted legacy key or error text cannot run
    /// in the team's spreadsheet.
    static func csvField(_ value: String) -> String {
        var value = value
        if let first = value.first, ["=", "+", "-", "@", "\t", "\r"].contains(first) {
            value = "'" + value
        }
        guard value.contains(where: { $0 == "," || $0 == "\"" || $0 == "\n" || $0 == "\r" }) else { return value }
        return "\"" + value.replacingOccurrences(of: "\"", with: "\"\"") + "\""
    }
}
