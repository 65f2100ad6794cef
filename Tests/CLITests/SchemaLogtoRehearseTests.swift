import Foundation
import TestSupport
import Testing

extension SchemaLogtoTests {
    /// `baton rehearse` copies the users table (its trigger functions with it) and runs the migration there; the
    /// source is only read.
    @Test("baton rehearse on Logto's users table: every Apple user of the tenant selected, the source unchanged")
    func rehearse() async throws {
        try await SchemaWorld.run(.logto, apple: 3) { world in
            let before = try RehearseCommandTests.digest(world.databaseURL)
            let config = try world.configuration()
            let json = world.directory.path("rehearse.json")
            let result = try await runBatonOffPool(["rehearse", "--config", config, "--from", world.databaseURL, "--json", json])
            // One problem found (below): exit status 1, the rehearsal itself complete.
            #expect(result.status == 1, "\(result.stdout)\(result.stderr)")
            #expect(result.stderr.contains("not copied: POLICY public users users_tenant_id"), "\(result.stderr)")
            let output = try? JSONDecoder().decode(RehearseCommandTests.Output.self, from: Data(contentsOf: URL(fileURLWithPath: json)))
            #expect(output?.selected == world.people.count, "\(result.stdout)")
            // The admin tenant's Apple users hold the same identifiers (outside legacy.where): the one problem to report.
            #expect(output?.problems.map(\.kind) == ["shared_subject"] && output?.problems.first?.count == world.people.count,
                    "\(output?.problems ?? [])")
            #expect(try RehearseCommandTests.digest(world.databaseURL) == before)
        }
    }
}
