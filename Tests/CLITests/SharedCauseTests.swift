import BatonEmulator
import Foundation
import TestSupport
import Testing

/// Issue 14 item 14: a mistyped target team makes Apple refuse every user alike; the job stops after a few
/// identical errors instead of marking the whole table, and `--retry-unresolvable` undoes those few.
@Suite("Bulk jobs: a shared cause", .serialized)
struct SharedCauseTests {
    @Test("transfer-ids with a mistyped target: stops after 10 identical errors; the right target with --retry-unresolvable finishes everyone")
    func mistypedTarget() async throws {
        try await CommandFixture.run(users: 30, accept: false, database: .migrated(seedTransfers: false)) { fixture in
            let config = try fixture.configuration()
            let wrong = try await runBatonOffPool(["transfer-ids", "--config", config, "--target", "ZZZZZZZZZ9", "--yes", "--workers", "1", "--rate", "100"])
            #expect(wrong.status == 1, "\(wrong.stdout)\(wrong.stderr)")
            #expect(wrong.stderr.contains("same error"), "\(wrong.stderr)")
            let marked = Int(try TestDatabase.psql(fixture.databaseURL, "SELECT count(*) FROM baton.transfers WHERE state = 'unresolvable'")) ?? -1
            #expect((1..<10).contains(marked), "rows marked unresolvable by the shared cause: \(marked)")
            let right = try await runBatonOffPool(["transfer-ids", "--config", config, "--yes", "--retry-unresolvable", "--rate", "100"])
            #expect(right.status == 0, "\(right.stdout)\(right.stderr)")
            #expect(right.stderr.contains("\(marked) unresolvable rows made pending again"), "\(right.stderr)")
            #expect(try TestDatabase.psql(fixture.databaseURL, "SELECT count(*) FROM baton.transfers WHERE transfer_sub IS NOT NULL AND state = 'pending'") == "30")
        }
    }
}
