import BatonEmulator
import Foundation
#if canImport(FoundationXML)
import FoundationXML
#endif
import TestSupport
import Testing

/// Issue 44, "a transfer as a newcomer runs it": what a team meets on its first transfer, through the built binary
/// against the emulator and PostgreSQL.
@Suite("a transfer as a newcomer runs it", .serialized)
struct NewcomerTests {
    /// Revokes the first two users (legacy keys 1 and 2) and runs `baton transfer-ids --yes`: Apple refuses both.
    static func refuseTwoAtTransferIDs(_ fixture: CommandFixture) async throws -> (subjects: [String], run: ProcessResult) {
        let subjects = fixture.transfer.users.map(\.userIdentifier)
        for sub in subjects.prefix(2) { try fixture.emulator.revoke(clientID: "com.example.app", userIdentifier: sub) }
        let run = try await runBatonOffPool(["transfer-ids", "--config", try fixture.configuration(), "--yes", "--rate", "100"])
        return (subjects, run)
    }

    @Test("users Apple refused at transfer-ids: later runs, the dry run and doctor keep naming them; the log names each row")
    func refusedStayNamed() async throws {
        try await CommandFixture.run(users: 6, accept: false, database: .migrated(seedTransfers: false)) { fixture in
            let (subjects, first) = try await NewcomerTests.refuseTwoAtTransferIDs(fixture)
            #expect(first.status == 1, "\(first.stdout)\(first.stderr)")
            #expect(first.stdout.contains("unresolvable 2"), "\(first.stdout)")
            let refusals = first.stderr.split(separator: "\n").filter { $0.contains("msg=\"user unresolvable\"") }
            for sub in subjects.prefix(2) {
                #expect(refusals.contains { $0.contains("old_sub=\(sub)") }, "no log line names \(sub):\n\(first.stderr)")
            }
            #expect(try fixture.count("SELECT count(*) FROM baton.transfers WHERE state = 'unresolvable' AND transfer_sub IS NULL") == 2)

            let config = try fixture.configuration()
            let dry = try await runBatonOffPool(["transfer-ids", "--config", config, "--dry-run"])
            let again = try await runBatonOffPool(["transfer-ids", "--config", config, "--yes"])
            #expect(dry.status == 0, "\(dry.stdout)\(dry.stderr)")
            #expect(again.status == 1, "a run that leaves users refused is not a success:\n\(again.stdout)\(again.stderr)")
            for result in [first, dry, again] {
                #expect(result.stdout.contains("refused at transfer-ids: 2 users"), "\(result.stdout)")
                #expect(result.stdout.contains("legacy keys 1, 2"), "\(result.stdout)")
                #expect(result.stdout.contains("--retry-unresolvable") && result.stdout.contains("invalid_request"), "\(result.stdout)")
            }
            #expect(dry.stdout.contains("0 users need a transfer identifier"))

            let doctor = try await runBatonOffPool(["doctor", "--config", config])
            let line = doctor.stdout.split(separator: "\n").first { $0.hasPrefix("warn  refused at transfer-ids:") }.map(String.init)
            #expect(line?.contains("2 users") == true && line?.contains("legacy keys 1, 2") == true, "\(doctor.stdout)")
            #expect(line?.contains("--retry-unresolvable") == true, "\(doctor.stdout)")
            for output in [first.stdout, first.stderr, dry.stdout, again.stdout, doctor.stdout] {
                #expect(!subjects.contains { output.contains("\($0)@privaterelay") }, "an unmasked email in:\n\(output)")
            }
        }
    }

    @Test("the report counts refused users by the step that refused them and projects only the others; table, JSON, CSV and HTML agree")
    func reportCountsRefused() async throws {
        try await CommandFixture.run(users: 6, accept: false, database: .migrated(seedTransfers: false)) { fixture in
            let (subjects, _) = try await NewcomerTests.refuseTwoAtTransferIDs(fixture)
            let acceptedAt = try fixture.emulator.acceptTransfer(clientID: "com.example.app")
            let config = try fixture.configuration(acceptedAt: acceptedAt)
            // One more user revoked after the acceptance: the exchange refuses them.
            try fixture.emulator.revoke(clientID: "com.example.app", userIdentifier: subjects[2])
            let exchange = try await runBatonOffPool(["exchange", "--config", config, "--rate", "100"])
            #expect(exchange.status == 1, "\(exchange.stdout)\(exchange.stderr)")
            #expect(exchange.stdout.contains("done 3") && exchange.stdout.contains("unresolvable 1"), "\(exchange.stdout)")

            let json = try await runBatonOffPool(["report", "--config", config, "--format", "json"])
            #expect(json.status == 0, "\(json.stderr)")
            let report = try #require(try JSONSerialization.jsonObject(with: Data(json.stdout.utf8)) as? [String: Any])
            #expect(report["totals"] as? [String: Int] == ["total": 6, "migrated": 3, "pending": 0, "failed": 0, "unresolvable": 3, "unmatched_signins": 0])
            #expect(report["refused"] as? [String: Int] == ["transfer_identifiers": 2, "exchange": 1, "signin": 0], "\(json.stdout)")
            let projection = try #require(report["projection"] as? [String: Any])
            #expect(projection["status"] as? String == "complete", "\(projection)")
            #expect(projection["remaining"] as? Int == 0)
            let users = (report["unresolved"] as? [String: Any])?["users"] as? [[String: Any]] ?? []
            #expect(users.filter { $0["step"] as? String == "transfer-ids" }.count == 2, "\(users)")
            #expect(users.filter { $0["step"] as? String == "exchange" }.count == 1, "\(users)")

            let table = try await runBatonOffPool(["report", "--config", config])
            #expect(table.status == 0, "\(table.stderr)")
            #expect(!table.stdout.contains("migrate by"), "refused users projected as migrating:\n\(table.stdout)")
            let rows = table.stdout.split(separator: "\n").map { $0.split(separator: " ").map(String.init) }
            #expect(rows.contains { $0.prefix(2) == ["transfer-ids", "2"] }, "\(table.stdout)")
            #expect(rows.contains { $0.prefix(2) == ["exchange", "1"] }, "\(table.stdout)")

            let csv = try await runBatonOffPool(["report", "--config", config, "--format", "csv"])
            let lines = csv.stdout.components(separatedBy: "\r\n").filter { !$0.isEmpty }
            #expect(lines.first?.hasSuffix(",step") == true, "\(csv.stdout)")
            #expect(lines.filter { $0.contains(",unresolvable,") && $0.hasSuffix(",transfer-ids") }.count == 2, "\(csv.stdout)")
            #expect(lines.filter { $0.contains(",unresolvable,") && $0.hasSuffix(",exchange") }.count == 1, "\(csv.stdout)")

            let html = try await runBatonOffPool(["report", "--config", config, "--format", "html"])
            #expect(html.stdout.contains("<td>transfer-ids</td><td class=\"num\">2</td>"), "\(html.stdout)")
            #expect(html.stdout.contains("<td>exchange</td><td class=\"num\">1</td>"))
            #expect(!html.stdout.contains("migrate by"))
        }
    }

    @Test("doctor before the acceptance: the recipient's checks wait for it (exit 0), a key of the wrong team still fails")
    func doctorWaitsForAcceptance() async throws {
        try await CommandFixture.run(users: 2, accept: false) { fixture in
            for (name, acceptedAt) in [("absent.json", nil), ("future.json", Date().addingTimeInterval(2 * 86_400))] as [(String, Date?)] {
                let result = try await runBatonOffPool(["doctor", "--config", try fixture.configuration(name, acceptedAt: acceptedAt)])
                #expect(result.status == 0, "\(name):\n\(result.stdout)")
                let lines = result.stdout.split(separator: "\n").map(String.init)
                #expect(!lines.contains { $0.hasPrefix("FAIL") }, "\(name):\n\(result.stdout)")
                let secret = lines.first { $0.hasPrefix("WAIT  recipient secret:") }
                #expect(secret?.contains("accepted_at") == true, "\(name):\n\(result.stdout)")
                #expect(lines.contains { $0.hasPrefix("WAIT  transfer window:") }, "\(name):\n\(result.stdout)")
                #expect(lines.last?.hasSuffix("2 waiting for the acceptance") == true, "\(name):\n\(result.stdout)")
            }
            // The sender's key under the recipient's team ID: not a matter of waiting.
            let wrong = try fixture.configuration("wrong.json") { _, transfer in
                transfer["recipient"] = ["team_id": fixture.recipient.teamID, "key_id": fixture.sender.keyID, "private_key_path": "sender.p8"]
            }
            let result = try await runBatonOffPool(["doctor", "--config", wrong])
            #expect(result.status == 1)
            #expect(result.stdout.contains("FAIL  recipient secret:") && result.stdout.contains("is registered to team \(fixture.sender.teamID)"), "\(result.stdout)")
        }
    }

    @Test("the CSV is masked by default: the page, the runbook and report.md say so, and how to get the addresses")
    func csvMaskingSaid() async throws {
        let fixture = try await ReportFixture.make()
        defer { fixture.directory.remove() }
        let html = try await fixture.run(["--format", "html"])
        #expect(html.status == 0, "\(html.stderr)")
        let section = try #require(html.stdout.components(separatedBy: "<section id=\"unresolved\">").last?.components(separatedBy: "</section>").first)
        #expect(!section.contains("the CSV carries the addresses"), "\(section)")
        #expect(section.contains("masked by default") && section.contains("--unmasked") && section.contains("personal data"), "\(section)")
        // Every place the docs show the CSV says what it holds: masked addresses, or --unmasked and its warning.
        for doc in ["docs/runbook.md", "docs/report.md", "docs/troubleshooting.md"] {
            let text = try String(contentsOf: packageRoot.appendingPathComponent(doc), encoding: .utf8)
            for paragraph in text.components(separatedBy: "\n\n") {
                for unit in paragraph.hasPrefix("|") ? paragraph.components(separatedBy: "\n") : [paragraph] where unit.contains("--format csv") {
                    // "masked" said of the CSV itself, not only as part of the flag's name.
                    let says = unit.replacingOccurrences(of: "unmasked", with: "").contains("masked")
                        || (unit.contains("--unmasked") && unit.contains("personal data"))
                    #expect(says, "\(doc) shows the CSV without saying what it holds:\n\(unit)")
                }
            }
        }
        let runbook = try String(contentsOf: packageRoot.appendingPathComponent("docs/runbook.md"), encoding: .utf8)
        #expect(runbook.contains("--unmasked"))
    }

    @Test("a projected finish near the left edge: every chart label lies inside its SVG's viewBox")
    func chartLabelsInside() async throws {
        let directory = try KeyDirectory()
        defer { directory.remove() }
        let databaseURL = try TestDatabase.create("report_labels")
        try await migrateWithBaton(databaseURL)
        // Accepted three hours before the report; 40 users migrated since, 1 pending: the finish is an hour away.
        _ = try TestDatabase.psql(databaseURL, """
            CREATE TABLE public.users (id bigserial PRIMARY KEY, apple_sub text NOT NULL UNIQUE, email text);
            INSERT INTO baton.transfers (old_sub, new_sub, state, method, migrated_at)
            SELECT 'old-' || i, CASE WHEN i <= 40 THEN 'new-' || i END, CASE WHEN i <= 40 THEN 'migrated' ELSE 'pending' END,
                   CASE WHEN i <= 40 THEN 'exchange' END,
                   CASE WHEN i <= 40 THEN timestamptz '2026-11-01 01:00:00+00' + i * interval '1 minute' END
            FROM generate_series(1, 41) AS i;
            """)
        let config = try directory.writeJSON("baton.json", [
            "database": ["url": databaseURL],
            "apple": ["client_ids": ["com.example.app"]],
            "legacy": ["table": "public.users", "key_column": "id", "subject_column": "apple_sub", "email_column": "email"],
        ])
        let result = try await runBatonOffPool(["report", "--config", config, "--format", "html",
                                                "--accepted-at", "2026-11-01T00:00:00Z", "--now", "2026-11-01T03:00:00Z"])
        #expect(result.status == 0, "\(result.stderr)")
        let svgs = result.stdout.components(separatedBy: "<svg ").dropFirst().map { "<svg " + $0.components(separatedBy: "</svg>")[0] + "</svg>" }
        #expect(svgs.count == 6)
        var finishLabels = 0
        for svg in svgs {
            let chart = try SVGLabels(svg)
            for label in chart.labels {
                // 12-unit text (the page's stylesheet), at least 6 units per character.
                let width = Double(label.text.count) * 6
                let start = switch label.anchor {
                case "middle": label.x - width / 2
                case "end": label.x - width
                default: label.x
                }
                #expect(start >= 0 && start + width <= chart.width, "'\(label.text)' spans \(start)...\(start + width), outside 0...\(chart.width)")
                if label.text.hasPrefix("projected finish") { finishLabels += 1 }
            }
        }
        #expect(finishLabels == 2, "a projected finish on both drawings of the progress chart")
    }
}

/// The `<text>` elements of one SVG drawing and its viewBox width, read with `XMLParser`.
final class SVGLabels: NSObject, XMLParserDelegate {
    struct Label {
        var x: Double
        var anchor: String
        var text: String
    }

    private(set) var width = 0.0
    private(set) var labels: [Label] = []
    private var open: Label?

    init(_ svg: String) throws {
        super.init()
        let parser = XMLParser(data: Data(svg.utf8))
        parser.delegate = self
        guard parser.parse() else { throw parser.parserError ?? CocoaError(.coderReadCorrupt) }
    }

    func parser(_ parser: XMLParser, didStartElement name: String, namespaceURI: String?, qualifiedName: String?, attributes: [String: String] = [:]) {
        if name == "svg" { width = Double(attributes["viewBox"]?.split(separator: " ")[2] ?? "") ?? 0 }
        if name == "text" { open = Label(x: Double(attributes["x"] ?? "") ?? .nan, anchor: attributes["text-anchor"] ?? "start", text: "") }
    }

    func parser(_ parser: XMLParser, foundCharacters string: String) {
        open?.text += string
    }

    func parser(_ parser: XMLParser, didEndElement name: String, namespaceURI: String?, qualifiedName: String?) {
        if name == "text", let label = open {
            labels.append(label)
            open = nil
        }
    }
}
