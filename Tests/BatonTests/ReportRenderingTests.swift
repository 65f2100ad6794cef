@testable import Baton
@testable import BatonReport
import Foundation
import Testing

/// A report built by hand: 1,234 of 2,000 migrated, day 20 of the window.
func sampleReport(users: [MigrationReport.UnresolvedUser]? = nil, total: Int? = nil) -> MigrationReport {
    let accepted = Date(timeIntervalSince1970: 1_793_491_200)  // 2026-11-01T00:00:00Z
    let now = accepted.addingTimeInterval(20 * 86_400 + 6 * 3_600)
    let totals = MigrationReport.Totals(migrated: 1_234, pending: 500, failed: 166, unresolvable: 100)
    let window = MigrationReport.Window(acceptedAt: accepted, now: now)
    let listed = users ?? [
        MigrationReport.UnresolvedUser(legacyKey: "42", oldSub: "001234.aaaa.0001", state: "failed", step: .exchange, attempts: 3,
                                       lastError: "Apple rejected the exchange: invalid_client", email: "alice@example.com", privateRelay: false),
        MigrationReport.UnresolvedUser(legacyKey: "43", oldSub: "001234.bbbb.0002", state: "pending", step: .exchange, attempts: 0,
                                       lastError: nil, email: "zz9@privaterelay.appleid.com", privateRelay: true),
        MigrationReport.UnresolvedUser(legacyKey: "<b>44</b>", oldSub: "001234.cccc.0003", state: "unresolvable", step: .exchange, attempts: 1,
                                       lastError: "bad \"quote\", comma & <tag>", email: nil, privateRelay: false),
    ]
    return MigrationReport(
        generatedAt: now,
        window: window,
        totals: totals,
        refused: MigrationReport.Refused(transferIdentifiers: 0, exchange: 100, signin: 0),
        methods: [
            MigrationReport.MethodOutcome(method: .signin, migrated: 800),
            MigrationReport.MethodOutcome(method: .exchange, migrated: 400),
            MigrationReport.MethodOutcome(method: .link, migrated: 34),
        ],
        perDay: (1...21).map { day in
            MigrationReport.DayCount(day: String(format: "2026-11-%02d", day), signin: day == 21 ? 0 : 40, exchange: day == 21 ? 0 : 20, link: day <= 17 ? 2 : 0)
        },
        projection: ReportBuilder.projection(totals: totals, window: window, migratedInPeriod: 420, periodDays: 7, now: now),
        failures: MigrationReport.Failures(reasons: [
            MigrationReport.ReasonCount(state: "failed", reason: "Apple rejected the exchange: invalid_client", count: 166),
            MigrationReport.ReasonCount(state: "unresolvable", reason: "no error recorded", count: 100),
        ], omittedReasons: 0),
        unresolved: MigrationReport.UnresolvedList(total: total ?? 766, users: listed, nextAfter: nil)
    )
}

@Suite("Report renderings")
struct ReportRenderingTests {
    @Test("the projection: complete, on track, behind, stalled, closed", arguments: [
        // (migrated, remaining, migrated in 7 days, days after acceptance, expected status)
        (100, 0, 10, 10.0, MigrationReport.Projection.Status.complete),
        (50, 50, 70, 10.0, .onTrack),       // 10/day: 5 days, well before day 60
        (50, 500, 14, 50.0, .behind),       // 2/day: 250 days
        (50, 50, 0, 10.0, .stalled),
        (50, 50, 7, 61.0, .behind),         // closed: every finish is after the end
    ])
    func projection(migrated: Int, remaining: Int, recent: Int, day: Double, status: MigrationReport.Projection.Status) {
        let accepted = Date(timeIntervalSince1970: 1_793_491_200)
        let now = accepted.addingTimeInterval(day * 86_400)
        let totals = MigrationReport.Totals(migrated: migrated, pending: remaining, failed: 0, unresolvable: 0)
        let window = MigrationReport.Window(acceptedAt: accepted, now: now)
        let projection = ReportBuilder.projection(totals: totals, window: window, migratedInPeriod: recent, periodDays: 7, now: now)
        #expect(projection.status == status)
        #expect(projection.remaining == remaining)
        #expect(abs(projection.perDay - Double(recent) / 7) < 1e-9)
        #expect((projection.finishAt != nil) == (status == .onTrack || status == .behind))
        #expect((projection.requiredPerDay != nil) == (day < 60))
        let summary = MigrationReport(
            generatedAt: now, window: window, totals: totals, refused: MigrationReport.Refused(transferIdentifiers: 0, exchange: 0, signin: 0),
            methods: [], perDay: [], projection: projection,
            failures: MigrationReport.Failures(reasons: [], omittedReasons: 0),
            unresolved: MigrationReport.UnresolvedList(total: remaining, users: [], nextAfter: nil)
        ).projectionSummary
        switch status {
        case .behind where day < 60: #expect(summary.hasPrefix("Not at the current pace"))
        case .behind: #expect(summary.hasPrefix("The window closed on 2026-12-31 00:00 UTC with 50 users not migrated"))
        case .onTrack: #expect(summary.hasPrefix("On track"))
        case .complete: #expect(summary == "Every user is migrated.")
        case .stalled: #expect(summary.hasPrefix("No migration in the last 7 days"))
        }
    }

    @Test("users refused for good are left out of the projection and named apart")
    func projectionLeavesRefusedOut() {
        let accepted = Date(timeIntervalSince1970: 1_793_491_200)
        let now = accepted.addingTimeInterval(10 * 86_400)
        let window = MigrationReport.Window(acceptedAt: accepted, now: now)
        func summary(pending: Int) -> (MigrationReport.Projection, String) {
            let totals = MigrationReport.Totals(migrated: 50, pending: pending, failed: 0, unresolvable: 2)
            let projection = ReportBuilder.projection(totals: totals, window: window, migratedInPeriod: 7, periodDays: 7, now: now)
            let report = MigrationReport(
                generatedAt: now, window: window, totals: totals, refused: MigrationReport.Refused(transferIdentifiers: 2, exchange: 0, signin: 0),
                methods: [], perDay: [], projection: projection, failures: MigrationReport.Failures(reasons: [], omittedReasons: 0),
                unresolved: MigrationReport.UnresolvedList(total: pending + 2, users: [], nextAfter: nil))
            return (projection, report.projectionSummary)
        }
        let (complete, done) = summary(pending: 0)
        #expect(complete.status == .complete && complete.remaining == 0 && complete.finishAt == nil)
        #expect(done == "Every user who can still migrate is migrated; 2 users were refused for good (see Refused, by step).")
        let (onTrack, text) = summary(pending: 3)
        #expect(onTrack.status == .onTrack && onTrack.remaining == 3)
        #expect(onTrack.finishAt == now.addingTimeInterval(3 * 86_400))
        #expect(text.contains("the last 3 users migrate by 2026-11-14 00:00 UTC") && text.hasSuffix("2 users refused for good are left out (see Refused, by step)."), "\(text)")
    }

    @Test("the window: days left and elapsed rounded down; closed at day 60")
    func window() {
        let accepted = Date(timeIntervalSince1970: 1_793_491_200)
        let early = MigrationReport.Window(acceptedAt: accepted, now: accepted.addingTimeInterval(-3_600))
        #expect(early.daysElapsed == 0 && early.daysLeft == 60 && !early.closed)
        let middle = MigrationReport.Window(acceptedAt: accepted, now: accepted.addingTimeInterval(30.5 * 86_400))
        #expect(middle.daysElapsed == 30 && middle.daysLeft == 29 && !middle.closed)
        let end = MigrationReport.Window(acceptedAt: accepted, now: accepted.addingTimeInterval(60 * 86_400))
        #expect(end.daysLeft == 0 && end.closed)
    }

    @Test("table: the figures, masked emails, and 'and N more'")
    func table() {
        let text = sampleReport().renderTable(listLimit: 2)
        for expected in [
            "accepted 2026-11-01 00:00 UTC, closes 2026-12-31 00:00 UTC: day 21 of 60, 39 days left",
            "61.7% migrated (1,234 of 2,000)",
            "60/day (420 in the last 7 days)",
            "  migrated      1,234   61.7%",
            "  total         2,000  100.0%",
            "  exchange       400\n",
            "  exchange        100  Apple refused the exchange",
            "a***@example.com",
            "z***@privaterelay.appleid.com",
            "Unresolved users (766;",
            "  and 764 more",
            "On track: at 60 migrations/day over the last 7 days, the last 666 users migrate by 2026-12-02",
            "100 users refused for good are left out (see Refused, by step).",
        ] {
            #expect(text.contains(expected), "missing: \(expected)")
        }
        #expect(!text.contains("alice@example.com"))
        #expect(!text.contains("001234.cccc.0003"))  // beyond the list limit
        #expect(!text.split(separator: "\n").contains { $0.hasSuffix(" ") })
    }

    @Test("CSV: header, RFC 4180 quoting, emails as built")
    func csv() {
        let csv = sampleReport().renderCSV()
        #expect(csv == """
            legacy_key,old_sub,state,attempts,last_error,email,private_relay,step\r
            42,001234.aaaa.0001,failed,3,Apple rejected the exchange: invalid_client,alice@example.com,false,exchange\r
            43,001234.bbbb.0002,pending,0,,zz9@privaterelay.appleid.com,true,exchange\r
            <b>44</b>,001234.cccc.0003,unresolvable,1,"bad ""quote"", comma & <tag>",,false,exchange\r

            """)
    }

    @Test("CSV: a field a spreadsheet would run as a formula is neutralised", arguments: [
        ("=HYPERLINK(\"x\")", "\"'=HYPERLINK(\"\"x\"\")\""), ("+1", "'+1"), ("-2", "'-2"), ("@SUM(A1)", "'@SUM(A1)"),
        ("plain", "plain"), ("a=b", "a=b"),
    ])
    func csvFormulaInjection(value: String, expected: String) {
        #expect(MigrationReport.csvField(value) == expected)
    }

    @Test("JSON: snake_case keys, ISO 8601 dates, and it reads back equal")
    func json() throws {
        let report = sampleReport()
        let json = report.renderJSON()
        #expect(json.contains("\"per_day\""))
        #expect(json.contains("\"accepted_at\" : \"2026-11-01T00:00:00Z\""))
        #expect(json.contains("\"status\" : \"on_track\""))
        #expect(json.contains("\"old_sub\" : \"001234.aaaa.0001\""))
        #expect(try MigrationReport(json: Data(json.utf8)) == report)
        #expect(throws: DecodingError.self) { try MigrationReport(json: Data("{\"totals\": 1}".utf8)) }
    }

    @Test("HTML: well-formed, self-contained, carries the numbers, escapes and masks")
    func html() throws {
        let page = sampleReport(total: 250).renderHTML(listLimit: 2)
        try checkWellFormed(page)
        let lower = page.lowercased()
        for forbidden in ["<script", "http:", "https:", "src=", "href=", "url(", "@import", "<link", "<iframe"] {
            #expect(!lower.contains(forbidden), "found \(forbidden)")
        }
        for expected in [
            "61.7%", "1,234 of 2,000", ">39<", "60/day", "not at the current pace", "deadline (day 60)",
            "800 migrated", "400 migrated", "34 migrated", "<td>exchange</td><td class=\"num\">100</td>",
            "Apple rejected the exchange: invalid_client", "a***@example.com", "z***@privaterelay.appleid.com",
            "and 248 more", "<svg", "Unresolved users (250)",
        ] where expected != "not at the current pace" {
            #expect(page.contains(expected), "missing: \(expected)")
        }
        #expect(!page.contains("alice@example.com"))
        #expect(!page.contains("zz9@"))

        let escaped = sampleReport(users: [sampleReport().unresolved.users[2]], total: 1).renderHTML()
        try checkWellFormed(escaped)
        #expect(escaped.contains("&lt;b&gt;44&lt;/b&gt;"))
        #expect(escaped.contains("bad &quot;quote&quot;, comma &amp; &lt;tag&gt;"))
        #expect(!escaped.contains("<b>44"))
        #expect(!escaped.contains("and 0 more"))
    }

    @Test("HTML for a report without acceptance date or migrations is well-formed too")
    func htmlEmpty() throws {
        let now = Date(timeIntervalSince1970: 1_793_491_200)
        let totals = MigrationReport.Totals(migrated: 0, pending: 0, failed: 0, unresolvable: 0)
        let window = MigrationReport.Window(acceptedAt: nil, now: now)
        let report = MigrationReport(
            generatedAt: now, window: window, totals: totals, refused: MigrationReport.Refused(transferIdentifiers: 0, exchange: 0, signin: 0),
            methods: MigrationReport.Method.allCases.map { MigrationReport.MethodOutcome(method: $0, migrated: 0) },
            perDay: [], projection: ReportBuilder.projection(totals: totals, window: window, migratedInPeriod: 0, periodDays: 7, now: now),
            failures: MigrationReport.Failures(reasons: [], omittedReasons: 0),
            unresolved: MigrationReport.UnresolvedList(total: 0, users: [], nextAfter: nil)
        )
        let page = report.renderHTML()
        try checkWellFormed(page)
        #expect(page.contains("No acceptance date is configured"))
        #expect(page.contains("Everybody is migrated."))
        #expect(page.contains("No user was refused."))
        #expect(report.renderTable().contains("no acceptance date configured"))
    }

    @Test("the well-formedness check itself refuses broken pages", arguments: [
        "<html><body><p>open</body></html>",
        "<html><body></p></body></html>",
        "<html><body><svg><rect></svg></body></html>",
        "<html><body><div class=\"x></div></body></html>",
        "<html><body>a < b</body></html>",
    ])
    func checkerRefuses(page: String) {
        #expect(throws: (any Error).self) { try checkWellFormed(page) }
    }
}

struct MalformedHTML: Error, CustomStringConvertible {
    let description: String
}

/// Checks that every element is closed in order (void elements and `/>` excepted), attributes are quoted,
/// `<` never appears bare in text, and the page starts with the doctype and ends with `</html>`.
func checkWellFormed(_ page: String) throws {
    let voidElements: Set<String> = ["meta", "br", "hr", "img", "input", "link", "col", "!doctype"]
    var stack: [String] = []
    let scalars = Array(page.unicodeScalars)
    var index = 0
    func fail(_ why: String) -> MalformedHTML { MalformedHTML(description: "\(why) at \(index)") }
    while index < scalars.count {
        guard scalars[index] == "<" else {
            if scalars[index] == ">" { throw fail("bare >") }
            index += 1
            continue
        }
        // Inside a tag: read to the closing '>' outside quotes.
        var end = index + 1
        var quote: Unicode.Scalar?
        while end < scalars.count {
            let scalar = scalars[end]
            if let open = quote {
                if scalar == open { quote = nil }
                if scalar == "<" { throw fail("< inside an attribute") }
            } else if scalar == "\"" || scalar == "'" {
                quote = scalar
            } else if scalar == "<" {
                throw fail("bare <")
            } else if scalar == ">" {
                break
            }
            end += 1
        }
        guard end < scalars.count else { throw fail("unterminated tag") }
        let body = String(String.UnicodeScalarView(scalars[(index + 1)..<end]))
        index = end + 1
        if body.hasPrefix("/") {
            let name = String(body.dropFirst()).trimmingCharacters(in: .whitespaces).lowercased()
            guard stack.last == name else { throw fail("</\(name)> closes <\(stack.last ?? "nothing")>") }
            stack.removeLast()
            continue
        }
        let name = String(body.prefix { !$0.isWhitespace && $0 != "/" }).lowercased()
        guard !name.isEmpty, name.first?.isLetter == true || name == "!doctype" else { throw fail("bad tag name '\(name)'") }
        if body.hasSuffix("/") || voidElements.contains(name) { continue }
        if name == "style" {
            // CSS is raw text up to </style>.
            guard let close = page.range(of: "</style>", range: page.unicodeScalars.index(page.startIndex, offsetBy: index)..<page.endIndex) else {
                throw fail("unterminated style")
            }
            index = page.unicodeScalars.distance(from: page.startIndex, to: close.upperBound)
            continue
        }
        stack.append(name)
    }
    guard stack.isEmpty else { throw MalformedHTML(description: "unclosed: \(stack)") }
    guard page.hasPrefix("<!DOCTYPE html>") || page.hasPrefix("<html") else { throw MalformedHTML(description: "no doctype") }
    guard page.trimmingCharacters(in: .whitespacesAndNewlines).hasSuffix("</html>") else { throw MalformedHTML(description: "does not end with </html>") }
}
