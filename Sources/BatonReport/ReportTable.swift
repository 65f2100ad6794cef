import Baton
import Foundation

extension MigrationReport {
    /// The default number of unresolved users a table or page lists before "and N more": 20 in a
    /// terminal; ``renderHTML(listLimit:)`` lists 100.
    public static let tableListLimit = 20

    /// The report as plain text for a terminal: the window, progress, pace, the states, the methods, the users
    /// refused by step, every day with migrations, failures by reason, and the first unresolved users with emails
    /// masked.
    /// - Parameter listLimit: unresolved users listed at most; default ``tableListLimit``.
    public func renderTable(listLimit: Int = MigrationReport.tableListLimit) -> String {
        var out: [String] = []
        out.append("Baton migration report, \(ReportFormat.timestamp(generatedAt))")
        out.append("")

        if let accepted = window.acceptedAt, let end = window.endsAt {
            let days = window.closed
                ? "closed"
                : "day \(min(60, (window.daysElapsed ?? 0) + 1)) of 60, \(window.daysLeft ?? 0) days left"
            out.append("Window      accepted \(ReportFormat.timestamp(accepted)), closes \(ReportFormat.timestamp(end)): \(days)")
        } else {
            out.append("Window      no acceptance date configured (apple.transfer.accepted_at)")
        }
        let filled = Int((totals.migratedFraction * 30).rounded(.down))
        out.append("Progress    [\(String(repeating: "#", count: filled))\(String(repeating: ".", count: 30 - filled))] \(ReportFormat.percent(totals.migratedFraction)) migrated (\(ReportFormat.count(totals.migrated)) of \(ReportFormat.count(totals.total)))")
        out.append("Pace        \(ReportFormat.rate(projection.perDay))/day (\(ReportFormat.count(projection.migratedInPeriod)) in the last \(ReportFormat.days(projection.periodDays)) days)")
        out.append("Projection  \(projectionSummary)")
        if totals.unmatchedSignins > 0 {
            out.append("Unmatched   \(ReportFormat.count(totals.unmatchedSignins)) sign-ins carried a transfer_sub that leads to no record (answered unmatched; POST /v1/link)")
        }
        out.append("")

        out.append(contentsOf: grid(
            ["State", "Users", "Share"],
            stateCounts.map { name, count in
                [name, ReportFormat.count(count), ReportFormat.percent(totals.total == 0 ? 0 : Double(count) / Double(totals.total))]
            },
            rightAligned: [1, 2]
        ))
        out.append("")

        out.append(contentsOf: grid(
            ["Method", "Migrated"],
            methods.map { [$0.method.label, ReportFormat.count($0.migrated)] },
            rightAligned: [1]
        ))
        out.append("")

        out.append("Refused for good, by step (left out of the projection)")
        if refused.isEmpty {
            out.append("  none")
        } else {
            out.append(contentsOf: grid(["Step", "Users", "Means, and the way out"], refusedRows.map { [$0.step, ReportFormat.count($0.count), $0.means] }, rightAligned: [1]))
        }
        out.append("")

        // Every day with a migration, from the first: a quiet fortnight must not hide the busy first week.
        let busy = perDay.filter { $0.total > 0 }
        let quiet = perDay.count - busy.count
        let note = quiet == 1 ? "; 1 day without is left out" : "; \(quiet) days without are left out"
        out.append("Migrations per day (UTC)\(quiet > 0 ? note : "")")
        if busy.isEmpty {
            out.append("  none yet")
        } else {
            let peak = max(1, busy.map(\.total).max() ?? 1)
            out.append(contentsOf: grid(
                ["Day", "Sign-in", "Exchange", "Link", "Total", ""],
                busy.map { day in
                    [day.day, ReportFormat.count(day.signin), ReportFormat.count(day.exchange), ReportFormat.count(day.link),
                     ReportFormat.count(day.total), String(repeating: "#", count: Int((Double(day.total) / Double(peak) * 30).rounded(.up)))]
                },
                rightAligned: [1, 2, 3, 4]
            ))
        }
        out.append("")

        out.append("Failures by reason")
        if failures.reasons.isEmpty {
            out.append("  none")
        } else {
            out.append(contentsOf: grid(
                ["State", "Users", "Reason"],
                failures.reasons.map { [$0.state, ReportFormat.count($0.count), $0.reason] },
                rightAligned: [1]
            ))
            if failures.omittedReasons > 0 {
                out.append("  and \(ReportFormat.count(failures.omittedReasons)) more reasons")
            }
        }
        out.append("")

        out.append(duplicatesHeading)
        if duplicates.count == 0 {
            out.append("  none")
        } else {
            out.append(contentsOf: grid(
                ["Fresh key", "Legacy key", "Found by", "Status", "Fresh record created"],
                duplicates.items.map { [$0.freshKey, $0.legacyKey, $0.foundBy, $0.status, $0.freshCreatedAt.map(ReportFormat.timestamp) ?? "-"] },
                rightAligned: []
            ))
        }
        out.append("")

        let listed = Array(unresolved.users.prefix(max(0, listLimit)))
        out.append("Unresolved users (\(ReportFormat.count(unresolved.total)); all of them: baton report --format csv, emails masked unless --unmasked)")
        if unresolved.total == 0 {
            out.append("  none")
        } else if !listed.isEmpty {
            out.append(contentsOf: grid(
                ["Legacy key", "Old identifier", "State", "Step", "Attempts", "Email", "Last error"],
                listed.map { user in
                    [user.legacyKey ?? "-", user.oldSub, user.state, user.step.rawValue, String(user.attempts),
                     user.email.map(ReportFormat.maskEmail) ?? "-", user.lastError ?? ""]
                },
                rightAligned: [4]
            ))
        }
        if unresolved.total > listed.count {
            out.append("  and \(ReportFormat.count(unresolved.total - listed.count)) more")
        }
        return out.joined(separator: "\n") + "\n"
    }

    /// Each state's name and count, then the total.
    var stateCounts: [(String, Int)] {
        [("migrated", totals.migrated), ("pending", totals.pending), ("failed", totals.failed),
         ("unresolvable", totals.unresolvable), ("total", totals.total)]
    }

    /// One row per step of ``refused``: its name, the users (or sign-ins) it refused, what that means and the way out.
    var refusedRows: [(step: String, count: Int, means: String)] {
        [
            (Step.transferIdentifiers.rawValue, refused.transferIdentifiers,
             "Apple made no transfer identifier (last error): baton transfer-ids --retry-unresolvable once a shared cause is fixed, else POST /v1/link or email"),
            (Step.exchange.rawValue, refused.exchange,
             "Apple refused the exchange, or no record matched or the identifier was taken (last error): a sign-in in the window still migrates a user who comes back; baton exchange --retry-unresolvable once a shared cause is fixed, baton merge for a duplicate, else POST /v1/link"),
            ("sign-in", refused.signin, "sign-ins answered unmatched: their transfer_sub leads to no record; POST /v1/link"),
        ]
    }

    /// Columns padded to their widest cell, two spaces apart, indented by two.
    private func grid(_ header: [String], _ rows: [[String]], rightAligned: Set<Int>) -> [String] {
        let all = [header] + rows
        var widths = Array(repeating: 0, count: header.count)
        for row in all {
            for (index, cell) in row.enumerated() where index < widths.count {
                widths[index] = max(widths[index], cell.count)
            }
        }
        return all.map { row in
            let cells = row.enumerated().map { index, cell in
                let padding = String(repeating: " ", count: widths[index] - cell.count)
                if index == row.count - 1 && !rightAligned.contains(index) { return cell }
                return rightAligned.contains(index) ? padding + cell : cell + padding
            }
            let line = "  " + cells.joined(separator: "  ")
            return String(line.reversed().drop(while: { $0 == " " }).reversed())
        }
    }
}
