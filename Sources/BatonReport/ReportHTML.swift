import Baton
import Foundation

extension MigrationReport {
    /// The default number of unresolved users the HTML page lists before "and N more": 100.
    public static let htmlListLimit = 100

    /// The report as one self-contained HTML page (the body of `GET /report`): inline CSS and inline SVG
    /// charts (progress against the deadline, migrated by method, migrations per day), the users refused by
    /// step, no script, no link to anything outside the page, emails masked. A Content-Security-Policy in the page forbids
    /// every fetch, so a browser refuses (and reports) anything that would leave it.
    /// - Parameters:
    ///   - listLimit: unresolved users listed at most; default ``htmlListLimit``.
    ///   - refreshSeconds: when set, a `<meta http-equiv="refresh">` reloads the page every so many
    ///     seconds (`GET /report` sets it; a saved file has none); default nil.
    public func renderHTML(listLimit: Int = MigrationReport.htmlListLimit, refreshSeconds: Int? = nil) -> String {
        var page = HTMLPage()
        let refresh = refreshSeconds.map { "<meta http-equiv=\"refresh\" content=\"\(max(1, $0))\">\n" } ?? ""
        let refreshNote = refreshSeconds.map { "; this page reloads every \(ReportFormat.interval(max(1, $0)))" } ?? ""
        page.raw("""
            <!DOCTYPE html>
            <html lang="en">
            <head>
            <meta charset="utf-8">
            <meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'">
            <meta name="viewport" content="width=device-width, initial-scale=1">
            \(refresh)<title>Baton migration report, \(htmlEscape(ReportFormat.day(generatedAt)))</title>
            <style>\(ReportStyle.css)</style>
            </head>
            <body>
            <header>
            <h1>Sign in with Apple transfer: migration report</h1>
            <p class="muted">Generated \(htmlEscape(ReportFormat.timestamp(generatedAt))) by Baton\(refreshNote)</p>
            </header>

            """)
        cards(&page)
        page.raw("<p class=\"summary \(statusClass)\">\(htmlEscape(projectionSummary))</p>\n")

        page.raw("<section id=\"progress\">\n<h2>Progress against the deadline</h2>\n")
        stateBar(&page)
        if window.acceptedAt != nil {
            page.raw(ReportCharts.progress(self))
        } else {
            page.raw("<p class=\"muted\">No acceptance date is configured (<code>apple.transfer.accepted_at</code>), so there is no deadline to chart.</p>\n")
        }
        page.raw("</section>\n")

        page.raw("<div class=\"columns\">\n<section id=\"methods\">\n<h2>Migrated by method</h2>\n")
        page.raw(ReportCharts.methods(self))
        page.raw("</section>\n<section id=\"states\">\n<h2>Users by state</h2>\n")
        stateTable(&page)
        page.raw("</section>\n</div>\n")
        refusedTable(&page)

        page.raw("<section id=\"per-day\">\n<h2>Migrations per day</h2>\n")
        if perDay.isEmpty {
            page.raw("<p class=\"muted\">No migration yet.</p>\n")
        } else {
            page.raw(ReportCharts.perDay(self))
        }
        page.raw("</section>\n")

        failuresTable(&page)
        duplicatesTable(&page)
        unresolvedTable(&page, listLimit: listLimit)

        page.raw("""
            <footer class="muted">Counts come from <code>baton.transfers</code>; days are UTC. The full list of \
            unresolved users: <code>baton report --format csv --out unresolved.csv</code> (emails masked); for a mailer \
            <code>--unmasked</code> writes the addresses (personal data).</footer>
            </body>
            </html>

            """)
        return page.text
    }

    private var statusClass: String {
        switch projection.status {
        case .complete, .onTrack: "good"
        case .behind, .stalled: "bad"
        }
    }

    private func cards(_ page: inout HTMLPage) {
        var days = "n/a", daysNote = "no acceptance date configured"
        if let end = window.endsAt {
            days = window.closed ? "closed" : String(window.daysLeft ?? 0)
            daysNote = "\(window.closed ? "closed" : "closes") \(ReportFormat.timestamp(end))"
        }
        let finish: String
        var finishNote = "at \(ReportFormat.rate(projection.perDay))/day"
        switch projection.status {
        case .complete:
            finish = "done"
            finishNote = "nobody left to migrate"
        case .stalled where window.closed, .behind where window.closed:
            finish = "window closed"
            finishNote = "re-sign-in campaign: see the CSV"
        case .stalled:
            finish = "none"
            finishNote = "no migration in the pace period"
        case .onTrack:
            finish = projection.finishAt.map(ReportFormat.day) ?? "-"
        case .behind:
            finish = "not at the current pace"
            if let required = projection.requiredPerDay { finishNote = "needs \(ReportFormat.rate(required))/day" }
        }
        let items: [(String, String, String, String)] = [
            ("Migrated", ReportFormat.percent(totals.migratedFraction), "\(ReportFormat.count(totals.migrated)) of \(ReportFormat.count(totals.total))", ""),
            ("Days left", days, daysNote, window.closed ? "bad" : ""),
            ("Pace", "\(ReportFormat.rate(projection.perDay))/day", "\(ReportFormat.count(projection.migratedInPeriod)) in the last \(ReportFormat.days(projection.periodDays)) days", ""),
            ("Projected finish", finish, finishNote, statusClass),
            ("Still to migrate", ReportFormat.count(projection.remaining),
             totals.unresolvable == 0 ? "pending or failed" : "pending or failed; \(ReportFormat.count(totals.unresolvable)) refused for good", ""),
        ]
        page.raw("<section class=\"cards\">\n")
        for (label, value, note, tone) in items {
            page.raw("<div class=\"card \(tone)\"><div class=\"label\">\(htmlEscape(label))</div><div class=\"value\">\(htmlEscape(value))</div><div class=\"note\">\(htmlEscape(note))</div></div>\n")
        }
        page.raw("</section>\n")
    }

    private func stateBar(_ page: inout HTMLPage) {
        page.raw("<div class=\"statebar\" role=\"img\" aria-label=\"users by state\">")
        for (name, count) in stateCounts.dropLast() where count > 0 {
            let share = Double(count) / Double(max(1, totals.total)) * 100
            page.raw("<span class=\"\(name)\" style=\"width: \(String(format: "%.3f", share))%\" title=\"\(name): \(ReportFormat.count(count))\"></span>")
        }
        page.raw("</div>\n<p class=\"legend\">")
        for (name, count) in stateCounts.dropLast() {
            page.raw("<span><i class=\"\(name)\"></i>\(name) \(ReportFormat.count(count))</span> ")
        }
        page.raw("</p>\n")
    }

    private func stateTable(_ page: inout HTMLPage) {
        page.raw("<table>\n<thead><tr><th>State</th><th class=\"num\">Users</th><th class=\"num\">Share</th></tr></thead>\n<tbody>\n")
        for (name, count) in stateCounts {
            let share = totals.total == 0 ? 0 : Double(count) / Double(totals.total)
            let tag = name == "total" ? "th" : "td"
            page.raw("<tr><\(tag)>\(name == "total" ? "Total" : "<i class=\"\(name)\"></i>\(name)")</\(tag)><td class=\"num\">\(ReportFormat.count(count))</td><td class=\"num\">\(ReportFormat.percent(share))</td></tr>\n")
        }
        page.raw("</tbody>\n</table>\n")
    }

    private func refusedTable(_ page: inout HTMLPage) {
        page.raw("<section id=\"refused\">\n<h2>Refused for good, by step</h2>\n")
        guard !refused.isEmpty else {
            page.raw("<p class=\"muted\">No user was refused.</p>\n</section>\n")
            return
        }
        page.raw("<p class=\"muted\">Left out of the projection: Apple or Baton refused them for good at this step.</p>\n")
        page.raw("<table>\n<thead><tr><th>Step</th><th class=\"num\">Users</th><th>Means, and the way out</th></tr></thead>\n<tbody>\n")
        for row in refusedRows {
            page.raw("<tr><td>\(htmlEscape(row.step))</td><td class=\"num\">\(ReportFormat.count(row.count))</td><td>\(htmlEscape(row.means))</td></tr>\n")
        }
        page.raw("</tbody>\n</table>\n</section>\n")
    }

    private func failuresTable(_ page: inout HTMLPage) {
        page.raw("<section id=\"failures\">\n<h2>Failures by reason</h2>\n")
        guard !failures.reasons.isEmpty else {
            page.raw("<p class=\"muted\">No failure recorded.</p>\n</section>\n")
            return
        }
        page.raw("<table>\n<thead><tr><th>State</th><th class=\"num\">Users</th><th>Reason (last error)</th></tr></thead>\n<tbody>\n")
        for reason in failures.reasons {
            page.raw("<tr><td><i class=\"\(htmlEscape(reason.state))\"></i>\(htmlEscape(reason.state))</td><td class=\"num\">\(ReportFormat.count(reason.count))</td><td>\(htmlEscape(reason.reason))</td></tr>\n")
        }
        page.raw("</tbody>\n</table>\n")
        if failures.omittedReasons > 0 {
            page.raw("<p class=\"muted\">and \(ReportFormat.count(failures.omittedReasons)) more reasons</p>\n")
        }
        page.raw("</section>\n")
    }

    private func duplicatesTable(_ page: inout HTMLPage) {
        page.raw("<section id=\"duplicates\">\n<h2>\(htmlEscape(duplicatesHeading))</h2>\n")
        guard duplicates.count > 0 else {
            page.raw("<p class=\"muted\">No second account under the new identifier.</p>\n</section>\n")
            return
        }
        page.raw("<p class=\"muted\">Users who signed in past Baton after acceptance got a second record; <code>baton merge --yes</code> moves the identifier onto the real one.</p>\n")
        page.raw("<table>\n<thead><tr><th>Fresh key</th><th>Legacy key</th><th>Found by</th><th>Status</th><th>Fresh record created</th></tr></thead>\n<tbody>\n")
        for item in duplicates.items {
            let created = item.freshCreatedAt.map(ReportFormat.timestamp) ?? "-"
            page.raw("<tr><td>\(htmlEscape(item.freshKey))</td><td>\(htmlEscape(item.legacyKey))</td><td>\(htmlEscape(item.foundBy))</td><td>\(item.status)</td><td class=\"nowrap\">\(htmlEscape(created))</td></tr>\n")
        }
        page.raw("</tbody>\n</table>\n</section>\n")
    }

    private func unresolvedTable(_ page: inout HTMLPage, listLimit: Int) {
        page.raw("<section id=\"unresolved\">\n<h2>Unresolved users (\(ReportFormat.count(unresolved.total)))</h2>\n")
        let listed = unresolved.users.prefix(max(0, listLimit))
        guard unresolved.total > 0 else {
            page.raw("<p class=\"muted\">Everybody is migrated.</p>\n</section>\n")
            return
        }
        page.raw("<p class=\"muted\">The users a re-sign-in campaign has to reach. Emails are masked here, and the CSV is masked by default: "
                 + "<code>baton report --format csv --unmasked --out unresolved.csv</code> writes the addresses, personal data "
                 + "(the file is readable by its owner only; delete it once the mailing is sent).</p>\n")
        if !listed.isEmpty {
            page.raw("<div class=\"scroll\">\n<table class=\"users\">\n<thead><tr><th>Legacy key</th><th>Old identifier</th><th>State</th><th>Step</th><th class=\"num\">Attempts</th><th>Email</th><th>Last error</th></tr></thead>\n<tbody>\n")
            for user in listed {
                let email = user.email.map(ReportFormat.maskEmail) ?? "-"
                page.raw("<tr><td>\(htmlEscape(user.legacyKey ?? "-"))</td><td class=\"mono\">\(htmlEscape(user.oldSub))</td><td class=\"nowrap\"><i class=\"\(htmlEscape(user.state))\"></i>\(htmlEscape(user.state))</td><td class=\"nowrap\">\(user.step.rawValue)</td><td class=\"num\">\(user.attempts)</td><td class=\"nowrap\">\(htmlEscape(email))\(user.privateRelay ? " <span class=\"tag\">relay</span>" : "")</td><td>\(htmlEscape(user.lastError ?? ""))</td></tr>\n")
            }
            page.raw("</tbody>\n</table>\n</div>\n")
        }
        if unresolved.total > listed.count {
            page.raw("<p class=\"more\">and \(ReportFormat.count(unresolved.total - listed.count)) more</p>\n")
        }
        page.raw("</section>\n")
    }
}

/// Accumulates the page's text.
private struct HTMLPage {
    private(set) var text = ""

    /// Appends markup as is.
    mutating func raw(_ markup: String) { text += markup }
}

/// Escapes text for HTML content and quoted attribute values.
private func htmlEscape(_ text: String) -> String {
    var out = ""
    out.reserveCapacity(text.utf8.count)
    for character in text {
        switch character {
        case "&": out += "&amp;"
        case "<": out += "&lt;"
        case ">": out += "&gt;"
        case "\"": out += "&quot;"
        case "'": out += "&#39;"
        default: out.append(character)
        }
    }
    return out
}

/// The page's stylesheet, inline.
enum ReportStyle {
    static let css = """
        :root { --ink: #1d2330; --muted: #667085; --line: #e4e7ec; --bg: #f6f7f9;
          --migrated: #2e9d57; --pending: #b8bfca; --failed: #e07b24; --unresolvable: #c4413b;
          --signin: #2f6fde; --exchange: #8e5bd8; --link: #1a9e8f; }
        * { box-sizing: border-box; }
        body { margin: 0 auto; max-width: 1120px; padding: 28px 32px 48px; background: var(--bg); color: var(--ink);
          font: 15px/1.45 -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif; }
        h1 { font-size: 26px; margin: 0 0 4px; }
        h2 { font-size: 17px; margin: 0 0 12px; }
        header { margin-bottom: 20px; }
        section { background: #fff; border: 1px solid var(--line); border-radius: 10px; padding: 18px 20px; margin: 0 0 18px; }
        .muted { color: var(--muted); }
        .cards { display: grid; grid-template-columns: repeat(5, 1fr); gap: 12px; background: none; border: 0; padding: 0; }
        .card { background: #fff; border: 1px solid var(--line); border-radius: 10px; padding: 12px 14px; }
        .card .label { color: var(--muted); font-size: 12px; text-transform: uppercase; letter-spacing: .04em; }
        .card .value { font-size: 24px; font-weight: 650; margin: 2px 0; line-height: 1.2; }
        .card .note { color: var(--muted); font-size: 13px; }
        .card.bad { border-color: var(--unresolvable); } .card.bad .value { color: var(--unresolvable); }
        .card.good .value { color: var(--migrated); }
        .summary { padding: 12px 16px; border-radius: 10px; margin: 0 0 18px; border-left: 5px solid var(--migrated); background: #eaf6ee; }
        .summary.bad { border-left-color: var(--unresolvable); background: #fbeceb; }
        .columns { display: grid; grid-template-columns: 3fr 2fr; gap: 18px; }
        .columns section { margin: 0 0 18px; }
        .statebar { display: flex; height: 22px; border-radius: 6px; overflow: hidden; background: var(--line); }
        .statebar span { display: block; height: 100%; }
        .legend { margin: 8px 0 4px; color: var(--muted); font-size: 13px; }
        .legend span { margin-right: 16px; white-space: nowrap; }
        i { display: inline-block; width: 10px; height: 10px; border-radius: 2px; margin-right: 6px; }
        .migrated { background: var(--migrated); } .pending { background: var(--pending); }
        .failed { background: var(--failed); } .unresolvable { background: var(--unresolvable); }
        .signin { background: var(--signin); } .exchange { background: var(--exchange); } .link { background: var(--link); }
        svg { display: block; width: 100%; height: auto; margin-top: 8px; }
        svg text { font: 12px -apple-system, "Segoe UI", Roboto, Arial, sans-serif; fill: var(--muted); }
        svg .strong { fill: var(--ink); font-weight: 600; }
        svg .bad { fill: var(--unresolvable); font-weight: 600; }
        table { width: 100%; border-collapse: collapse; font-size: 14px; }
        th, td { text-align: left; padding: 6px 8px; border-bottom: 1px solid var(--line); vertical-align: top; }
        thead th { color: var(--muted); font-weight: 600; font-size: 12px; text-transform: uppercase; letter-spacing: .03em; }
        .num { text-align: right; font-variant-numeric: tabular-nums; }
        .mono { font-family: ui-monospace, "SF Mono", Menlo, Consolas, monospace; font-size: 12px; }
        .nowrap, .users .mono { white-space: nowrap; }
        .scroll { overflow-x: auto; }
        .users td { font-size: 13px; }
        .tag { font-size: 11px; color: var(--muted); border: 1px solid var(--line); border-radius: 4px; padding: 0 4px; }
        .more { font-weight: 600; margin: 10px 0 0; }
        code { font-family: ui-monospace, Menlo, Consolas, monospace; font-size: 13px; }
        footer { font-size: 13px; margin-top: 8px; }
        @media (max-width: 800px) { .cards { grid-template-columns: repeat(2, 1fr); } .columns { grid-template-columns: 1fr; } }
        svg.narrow { display: none; }
        @media (max-width: 600px) {
          body { padding: 16px 12px 32px; } section { padding: 14px 12px; } h1 { font-size: 22px; }
          .card .value { font-size: 20px; }
          svg.wide { display: none; } svg.narrow { display: block; }
        }
        """
}
