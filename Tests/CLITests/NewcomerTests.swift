import BatonEmulator
import Foundation
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
}
