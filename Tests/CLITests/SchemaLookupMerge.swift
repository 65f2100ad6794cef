import BatonJSON
import Foundation
import TestSupport
import Testing

extension ServerLookup {
    /// `baton doctor`, then the cutover's duplicate on `framework`'s tables as the identity server's own lookup sees it:
    /// a second account made under the new `sub` of an Apple user, met and recorded by `baton exchange`, listed by
    /// `baton report`, merged by `baton merge`, after which the lookup finds the person's first account under the new
    /// `sub` and nothing under the old one; rows Baton must not touch stay as they were.
    func runMerge(_ framework: Framework) async throws {
        try await SchemaWorld.run(framework, apple: 2) { world in
            let person = world.people[0]
            let config = try world.configuration()
            let doctor = try await runBatonOffPool(["doctor", "--config", config])
            #expect(doctor.status == 0 && !doctor.stdout.contains("FAIL"), "\(doctor.stdout)\(doctor.stderr)")
            #expect(doctor.stdout.contains("ok    apple rows: legacy.where selects 2 rows"), "\(doctor.stdout)")

            // A sign-in past Baton after acceptance made a second account under the new sub.
            let newEmail = try world.claims(try world.token(person.id))["email"]!.stringValue!
            _ = try world.psql(framework.addApple(50, person.newSub, newEmail))
            let legacy = try world.psql(apple(person.oldSub)), fresh = try world.psql(apple(person.newSub))
            #expect(!legacy.isEmpty && !fresh.isEmpty && legacy != fresh)
            let before = try world.psql(framework.invariant)

            let ids = try await runBatonOffPool(["transfer-ids", "--yes", "--rate", "100", "--config", config])
            #expect(ids.stdout.contains("done 2,") && ids.stdout.contains("unresolvable 1,"), "\(ids.stdout)\(ids.stderr)")
            let exchange = try await runBatonOffPool(["exchange", "--config", config])
            #expect(exchange.status == 1 && exchange.stdout.contains("done 1,") && exchange.stdout.contains("unresolvable 1,"), "\(exchange.stdout)\(exchange.stderr)")
            #expect(try world.psql(apple(world.people[1].newSub)) != "", "the other user migrated with its copies")
            #expect(try world.psql(apple(person.oldSub)) == legacy && world.psql(apple(person.newSub)) == fresh, "the pair waits")

            let report = try await runBatonOffPool(["report", "--format", "json", "--config", config])
            let json = try JSON.parseObject(Array(report.stdout.utf8))
            #expect(json["duplicates"]?["count"]?.intValue == 1, "\(report.stdout.suffix(600))")
            #expect(json["totals"]?["migrated"]?.intValue == 1, "\(report.stdout.prefix(400))")

            let dryRun = try await runBatonOffPool(["merge", "--dry-run", "--config", config])
            #expect(dryRun.status == 0 && dryRun.stdout.hasSuffix("would merge 1\n"), "\(dryRun.stdout)\(dryRun.stderr)")
            let merge = try await runBatonOffPool(["merge", "--yes", "--config", config])
            #expect(merge.status == 0 && merge.stdout.hasSuffix("merged 1; throttled 0.0 s (0%)\n"), "\(merge.stdout)\(merge.stderr)")
            #expect(try world.psql(apple(person.newSub)) == legacy, "the first account under the new sub")
            #expect(try world.psql(apple(person.oldSub)) == "")
            #expect(try world.count("SELECT count(*) FROM baton.events WHERE kind = 'duplicate_merged'") == 1)
            #expect(try world.psql(framework.invariant) == before)
        }
    }
}

extension ServerLookup {
    /// The exchange, then `baton rollback --since`, on `framework`'s tables: the server's own lookup finds each Apple
    /// user under the new `sub` after the exchange and under the old one again after the rollback, with every table of
    /// the application back byte for byte (``RollbackCommandTests/applicationTables(_:)``: the copies too).
    func runRollback(_ framework: Framework) async throws {
        try await SchemaWorld.run(framework, apple: 3) { world in
            let config = try world.configuration()
            let ids = try await runBatonOffPool(["transfer-ids", "--yes", "--rate", "100", "--config", config])
            #expect(ids.status == 0, "\(ids.stdout)\(ids.stderr)")
            let accounts = try world.people.map { try world.psql(apple($0.oldSub)) }
            let before = try RollbackCommandTests.applicationTables(world)
            let start = ISO8601DateFormatter().string(from: Date().addingTimeInterval(-1))
            let exchange = try await runBatonOffPool(["exchange", "--config", config])
            #expect(exchange.stdout.contains("done 3,"), "\(exchange.stdout)\(exchange.stderr)")
            #expect(try world.people.map { try world.psql(apple($0.newSub)) } == accounts)

            let rollback = try await runBatonOffPool(["rollback", "--since", start, "--yes", "--config", config])
            #expect(rollback.status == 0 && rollback.stdout.hasSuffix("rolled back 3, refused 0\n"), "\(rollback.stdout)\(rollback.stderr)")
            #expect(try world.people.map { try world.psql(apple($0.oldSub)) } == accounts)
            #expect(try world.people.map { try world.psql(apple($0.newSub)) } == ["", "", ""])
            #expect(try RollbackCommandTests.applicationTables(world) == before)
        }
    }
}
