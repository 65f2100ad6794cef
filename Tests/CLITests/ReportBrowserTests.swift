import Foundation
import TestSupport
import Testing

/// The HTML report as a real browser renders it: `report.html` from `baton report --format html` and
/// `GET /report` from `baton serve`, opened in headless Chromium (Debian's `chromium`) at a phone width
/// and a desktop width by `scripts/browser-check.py`, which drives Chromium over the DevTools protocol and
/// reports console messages, every request the page made, the value of a measuring expression evaluated in
/// the page, and a full-page screenshot.
///
/// The screenshots (`report-file-390.png`, …, full page) and a copy of `report.html` are written to the
/// test's output directory: `$BATON_TEST_OUTPUT/ReportBrowserTests/` if set, otherwise
/// `.build/test-output/ReportBrowserTests/` (kept after the run; `make test` deletes only its temporary files).
@Suite("The HTML report in headless Chromium")
struct ReportBrowserTests {
    static let widths = [390, 1280]
    static let chromium = "/usr/bin/chromium"

    @Test("report.html and GET /report at 390 and 1280 px: no console error, no request out, charts inside the viewport, the JSON's figures")
    func pagesInChromium() async throws {
        // Fails, never skips, without Chromium: the check is part of `make test`.
        try #require(FileManager.default.isExecutableFile(atPath: Self.chromium),
                     "\(Self.chromium) is missing: run scripts/install-deps.sh (Debian package chromium)")
        let output = try Self.outputDirectory()
        let fixture = try await BrowserFixture.make()
        defer { fixture.directory.remove() }

        let json = try await fixture.report(["--format", "json"])
        try #require(json.status == 0, "\(json.stderr)")
        let expected = try #require(try JSONSerialization.jsonObject(with: Data(json.stdout.utf8)) as? [String: Any])
        let file = fixture.directory.path("report.html")
        let html = try await fixture.report(["--format", "html", "--out", file])
        try #require(html.status == 0, "\(html.stderr)")
        // Kept beside the screenshots, to look at or to screenshot again (docs/report.md).
        let kept = output.appendingPathComponent("report.html")
        try? FileManager.default.removeItem(at: kept)
        try FileManager.default.copyItem(atPath: file, toPath: kept.path)

        let port = try freeLoopbackPort()
        let server = try runProcessAsync(batonBinaryPath, ["serve", "--config", fixture.config],
                                         environment: ["BATON_LISTEN": "127.0.0.1:\(port)", "BATON_ADMIN_TOKEN": BrowserFixture.adminToken])
        defer { server.signal(SIGKILL); _ = try? server.wait(timeout: 10) }
        try await waitUntilListening(port: port)

        let pages: [(name: String, url: String, headers: [String], refresh: String?)] = [
            ("file", URL(fileURLWithPath: file).absoluteString, [], nil),
            ("served", "http://127.0.0.1:\(port)/report", ["Authorization: Bearer \(BrowserFixture.adminToken)"], String(BrowserFixture.refreshSeconds)),
        ]
        for page in pages {
            for width in Self.widths {
                let screenshot = output.appendingPathComponent("report-\(page.name)-\(width).png").path
                try? FileManager.default.removeItem(atPath: screenshot)
                var arguments = ["--url", page.url, "--width", String(width), "--height", width < 600 ? "844" : "900",
                                 "--evaluate", Self.measure, "--screenshot", screenshot, "--chromium", Self.chromium]
                for header in page.headers { arguments += ["--header", header] }
                let script = packageRoot.appendingPathComponent("scripts/browser-check.py").path
                let fixedArguments = arguments
                let run = try await offPool { try runProcess(script, fixedArguments, timeout: 120) }
                let context = "\(page.name) page at \(width) px"
                try #require(run.status == 0, "browser-check failed for the \(context): \(run.stderr)")
                let seen = try #require(try JSONSerialization.jsonObject(with: Data(run.stdout.utf8)) as? [String: Any])
                #expect(seen["console"] as? [String] == [], "console messages on the \(context)")
                #expect(seen["requests"] as? [String] == [page.url], "requests other than the page itself on the \(context)")
                let measured = try #require(seen["evaluated"] as? [String: Any], "no measurement for the \(context)")
                checkLayout(measured, width: width, context: context)
                checkFigures(measured, expected: expected, context: context)
                #expect(measured["refresh"] as? String == page.refresh, "meta refresh of the \(context)")
                let png = try Data(contentsOf: URL(fileURLWithPath: screenshot))
                #expect(png.starts(with: [0x89, 0x50, 0x4E, 0x47]) && png.count > 10_000, "screenshot of the \(context)")
            }
        }
    }

    /// Every chart shown with a size and inside the viewport, in the drawing for the width; the page no wider
    /// than the window.
    private func checkLayout(_ measured: [String: Any], width: Int, context: String) {
        let viewport = measured["clientWidth"] as? Double ?? 0
        #expect(measured["innerWidth"] as? Double == Double(width), "window width of the \(context)")
        #expect((measured["scrollWidth"] as? Double ?? .infinity) <= viewport, "horizontal scroll on the \(context): \(measured)")
        let svgs = measured["svgs"] as? [[String: Any]] ?? []
        #expect(measured["svgCount"] as? Int == 6, "two drawings of each chart on the \(context)")
        #expect(svgs.count == 3, "charts shown on the \(context)")
        for svg in svgs {
            #expect(svg["frame"] as? String == (width < 600 ? "narrow" : "wide"), "the drawing shown on the \(context)")
            let label = svg["label"] as? String ?? "?"
            let (left, right) = (svg["left"] as? Double ?? -1, svg["right"] as? Double ?? .infinity)
            #expect((svg["width"] as? Double ?? 0) > 100 && (svg["height"] as? Double ?? 0) > 50, "\(label) has no size on the \(context)")
            #expect(left >= 0 && right <= viewport + 0.5, "\(label) leaves the viewport on the \(context): \(left)...\(right) of \(viewport)")
            #expect(svg["clipped"] as? [String] == [], "labels cut off at the edge of \(label) on the \(context)")
        }
    }

    /// The figures the page shows equal those of `baton report --format json` for the same database.
    private func checkFigures(_ measured: [String: Any], expected: [String: Any], context: String) {
        let totals = expected["totals"] as? [String: Int] ?? [:]
        let total = totals["total"] ?? 0, migrated = totals["migrated"] ?? 0
        let unresolvedCount = (totals["pending"] ?? 0) + (totals["failed"] ?? 0) + (totals["unresolvable"] ?? 0)
        let window = expected["window"] as? [String: Any] ?? [:]
        let projection = expected["projection"] as? [String: Any] ?? [:]
        #expect(total > 2_000 && migrated > 1_000, "the fixture's figures")

        let cards = measured["cards"] as? [[String]] ?? []
        #expect(cards.count == 5, "cards on the \(context)")
        if cards.count == 5 {
            #expect(cards[0] == ["Migrated", percent(migrated, of: total), "\(grouped(migrated)) of \(grouped(total))"], "\(context)")
            #expect(cards[1][1] == String(window["days_left"] as? Int ?? -1), "days left on the \(context)")
            let periodDays = projection["period_days"] as? Double ?? 0
            #expect(cards[2][1] == "\(rate(projection["per_day"] as? Double ?? 0))/day", "pace on the \(context)")
            #expect(cards[2][2] == "\(grouped(projection["migrated_in_period"] as? Int ?? -1)) in the last \(Int(periodDays)) days", "\(context)")
            #expect(cards[4][0] == "Still to migrate" && cards[4][1] == grouped(projection["remaining"] as? Int ?? -1), "still to migrate on the \(context)")
        }
        #expect(measured["today"] as? [String] == ["today: \(percent(migrated, of: total))"], "progress chart on the \(context)")

        let states = ["migrated", "pending", "failed", "unresolvable"].map { name in
            [name, grouped(totals[name] ?? -1), percent(totals[name] ?? -1, of: total)]
        } + [["Total", grouped(total), percent(total, of: total)]]
        #expect(measured["states"] as? [[String]] == states, "users by state on the \(context)")

        var methods: [String] = []
        let labels = ["signin": "sign-in", "exchange": "exchange", "link": "link"]
        for method in expected["methods"] as? [[String: Any]] ?? [] {
            methods += [labels[method["method"] as? String ?? ""] ?? "?", "\(grouped(method["migrated"] as? Int ?? -1)) migrated"]
        }
        #expect(measured["methods"] as? [String] == methods, "migrated by method on the \(context)")

        let refused = expected["refused"] as? [String: Int] ?? [:]
        let refusedRows = [("transfer-ids", "transfer_identifiers"), ("exchange", "exchange"), ("sign-in", "signin")].map { [$0.0, grouped(refused[$0.1] ?? -1)] }
        #expect(measured["refused"] as? [[String]] == (refused.values.allSatisfy { $0 == 0 } ? [] : refusedRows), "refused by step on the \(context)")

        // Bars carry a title per method and day: their sums per day are the JSON's days with migrations.
        var bars: [String: Int] = [:]
        for title in measured["perDay"] as? [String] ?? [] {
            let parts = title.components(separatedBy: ": ")
            bars[parts[0], default: 0] += Int(parts.last?.replacingOccurrences(of: ",", with: "") ?? "") ?? -1_000_000
        }
        var days: [String: Int] = [:]
        for day in expected["per_day"] as? [[String: Any]] ?? [] {
            let count = ["signin", "exchange", "link"].reduce(0) { $0 + (day[$1] as? Int ?? 0) }
            if count > 0, let name = day["day"] as? String { days[name] = count }
        }
        #expect(days.count > 10 && bars == days, "migrations per day on the \(context)")

        let failures = expected["failures"] as? [String: Any] ?? [:]
        let reasons = (failures["reasons"] as? [[String: Any]] ?? []).map { reason in
            [reason["state"] as? String ?? "", grouped(reason["count"] as? Int ?? -1), reason["reason"] as? String ?? ""]
        }
        #expect(reasons.count >= 3 && measured["failures"] as? [[String]] == reasons, "failures by reason on the \(context)")

        let unresolved = expected["unresolved"] as? [String: Any] ?? [:]
        let users = (unresolved["users"] as? [[String: Any]] ?? []).prefix(100).map { user in
            let email = (user["email"] as? String).map { $0 + ((user["private_relay"] as? Bool ?? false) ? " relay" : "") } ?? "-"
            return [user["legacy_key"] as? String ?? "-", user["old_sub"] as? String ?? "", user["state"] as? String ?? "", user["step"] as? String ?? "",
                    String(user["attempts"] as? Int ?? -1), email, user["last_error"] as? String ?? ""]
        }
        #expect(measured["unresolvedHeading"] as? String == "Unresolved users (\(grouped(unresolved["total"] as? Int ?? -1)))", "\(context)")
        #expect(users.count == 100 && measured["unresolved"] as? [[String]] == Array(users), "unresolved users on the \(context)")
        #expect(measured["more"] as? String == "and \(grouped(unresolvedCount - 100)) more", "\(context)")
    }

    private func grouped(_ value: Int) -> String {
        let digits = String(value.magnitude)
        var out = ""
        for (index, digit) in digits.enumerated() {
            if index > 0, (digits.count - index) % 3 == 0 { out.append(",") }
            out.append(digit)
        }
        return value < 0 ? "-" + out : out
    }

    private func percent(_ part: Int, of whole: Int) -> String {
        String(format: "%.1f%%", whole == 0 ? 0 : Double(part) / Double(whole) * 100)
    }

    private func rate(_ value: Double) -> String {
        value >= 100 || value == value.rounded() ? grouped(Int(value.rounded())) : String(format: "%.1f", value)
    }

    /// Where the screenshots go; created if needed.
    static func outputDirectory() throws -> URL {
        let directory = ProcessInfo.processInfo.environment["BATON_TEST_OUTPUT"].map { URL(fileURLWithPath: $0) }
            ?? packageRoot.appendingPathComponent(".build/test-output")
        let url = directory.appendingPathComponent("ReportBrowserTests")
        try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
        return url
    }

    /// Runs in the page once it has loaded; what it returns comes back as JSON. Reads what a person sees
    /// (text content, sizes), not the renderer's inputs.
    static let measure = """
        (() => {
          const text = (e) => e ? e.textContent.replace(/\\s+/g, " ").trim() : null;
          const all = (selector, root = document) => [...root.querySelectorAll(selector)];
          // Each chart is drawn twice (wide, narrow) and the stylesheet hides one: read the one shown.
          const shown = (selector) => all(selector).filter((s) => s.getClientRects().length > 0);
          const root = document.documentElement;
          return {
            innerWidth: window.innerWidth,
            clientWidth: root.clientWidth,
            scrollWidth: Math.max(root.scrollWidth, document.body.scrollWidth),
            refresh: document.querySelector('meta[http-equiv="refresh"]')?.content ?? null,
            svgCount: all("svg").length,
            svgs: shown("svg").map((s) => {
              const r = s.getBoundingClientRect();
              const box = s.viewBox.baseVal;
              // Text running past the viewBox is cut off: list the labels that do.
              const clipped = all("text", s).filter((t) => {
                const b = t.getBBox();
                return b.x < -0.5 || b.y < -0.5 || b.x + b.width > box.width + 0.5 || b.y + b.height > box.height + 0.5;
              }).map(text);
              return { label: s.getAttribute("aria-label"), frame: s.getAttribute("class"), left: r.left, right: r.right, width: r.width, height: r.height, clipped };
            }),
            cards: all(".card").map((c) => [".label", ".value", ".note"].map((k) => text(c.querySelector(k)))),
            today: shown("#progress svg").flatMap((s) => all("text", s)).map(text).filter((t) => t.startsWith("today: ")),
            states: all("#states tbody tr").map((r) => all("th, td", r).map(text)),
            methods: shown("#methods svg").flatMap((s) => all("text", s)).map(text),
            perDay: shown("#per-day svg").flatMap((s) => all("rect title", s)).map(text),
            failures: all("#failures tbody tr").map((r) => all("td", r).map(text)),
            refused: all("#refused tbody tr").map((r) => all("td", r).slice(0, 2).map(text)),
            unresolvedHeading: text(document.querySelector("#unresolved h2")),
            unresolved: all("#unresolved tbody tr").map((r) => all("td", r).map(text)),
            more: text(document.querySelector("#unresolved .more")),
          };
        })()
        """
}

/// A database in the middle of a transfer, 20.5 days after acceptance: 2,400 users, 1,520 migrated by
/// sign-in (falling off), exchange (since day 10) and link, failures with three reasons, the rest pending.
/// Migration times sit six hours away from day and pace-period boundaries, so the report at "now" and the
/// service's report a few seconds later count the same.
struct BrowserFixture {
    static let adminToken = "browser-test-admin-token-0123456789"
    static let refreshSeconds = 120
    let directory: KeyDirectory
    let config: String
    let now: Date

    static func make() async throws -> BrowserFixture {
        let directory = try KeyDirectory()
        let databaseURL = try TestDatabase.create("report_browser")
        let migrated = try await runBatonOffPool(["db", "migrate", "--database-url", databaseURL])
        guard migrated.status == 0 else { throw TestSupportError("migrate failed: \(migrated.stderr)") }
        let now = Date(timeIntervalSince1970: Date().timeIntervalSince1970.rounded(.down))
        let accepted = ISO8601DateFormatter().string(from: now.addingTimeInterval(-20.5 * 86_400))
        _ = try TestDatabase.psql(databaseURL, """
            CREATE TABLE public.users (id bigserial PRIMARY KEY, apple_sub text NOT NULL UNIQUE, email text);
            INSERT INTO baton.transfers (old_sub, new_sub, state, method, attempts, last_error, migrated_at)
            SELECT '001234.' || md5(i::text) || '.' || lpad(i::text, 4, '0'),
                   CASE WHEN i <= 1520 THEN '002345.' || md5('new' || i) || '.' || lpad(i::text, 4, '0') END,
                   CASE WHEN i <= 1520 THEN 'migrated' WHEN i <= 1560 THEN 'failed' WHEN i <= 1590 THEN 'unresolvable' ELSE 'pending' END,
                   CASE WHEN i <= 1000 THEN 'signin' WHEN i <= 1500 THEN 'exchange' WHEN i <= 1520 THEN 'link' WHEN i <= 1590 THEN 'exchange' END,
                   CASE WHEN i BETWEEN 1521 AND 1590 THEN 3 WHEN i > 2300 THEN 1 ELSE 0 END,
                   CASE WHEN i BETWEEN 1521 AND 1550 THEN 'Apple answered invalid_client: the key belongs to another team'
                        WHEN i BETWEEN 1551 AND 1560 THEN 'HTTP 500 from Apple after 3 attempts'
                        WHEN i BETWEEN 1561 AND 1590 THEN 'Apple found no user for this transfer identifier'
                        WHEN i > 2300 THEN 'rate limited by Apple (429), retrying' END,
                   acc + (CASE WHEN i <= 1000 THEN floor(20 * (i / 1000.0) ^ 2)
                               WHEN i <= 1500 THEN 10 + i % 11
                               WHEN i <= 1520 THEN i % 21 END + 0.25) * interval '1 day'
            FROM generate_series(1, 2400) AS i, (SELECT timestamptz '\(accepted)' AS acc) AS a;
            INSERT INTO public.users (apple_sub, email)
            SELECT COALESCE(new_sub, old_sub),
                   CASE WHEN right(old_sub, 1) IN ('0', '3', '6') THEN substr(md5(old_sub), 1, 10) || '@privaterelay.appleid.com'
                        ELSE 'user' || right(old_sub, 4) || '@example.com' END
            FROM baton.transfers ORDER BY old_sub;
            """)
        let tree: [String: Any] = [
            "database": ["url": databaseURL, "pool_size": 2],
            // Unreachable on purpose: the service must not reach out while the test runs.
            "apple": ["base_url": "http://127.0.0.1:9", "client_ids": ["com.example.app"],
                      "transfer": ["client_id": "com.example.app", "accepted_at": accepted]],
            "legacy": ["table": "public.users", "key_column": "id", "subject_column": "apple_sub", "email_column": "email"],
            "report_refresh_seconds": refreshSeconds,
        ]
        try directory.write("baton.json", String(decoding: try JSONSerialization.data(withJSONObject: tree), as: UTF8.self))
        return BrowserFixture(directory: directory, config: directory.path("baton.json"), now: now)
    }

    /// `baton report` at the fixture's `now`.
    func report(_ arguments: [String]) async throws -> ProcessResult {
        try await runBatonOffPool(["report", "--config", config, "--now", String(Int(now.timeIntervalSince1970))] + arguments)
    }
}

/// Waits until `baton serve` accepts connections on `port` (or fails after ten seconds).
private func waitUntilListening(port: Int) async throws {
    for _ in 0..<200 {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0 }
        }
        close(fd)
        if connected { return }
        try await Task.sleep(for: .milliseconds(50))
    }
    throw TestSupportError("baton serve did not listen on port \(port)")
}

