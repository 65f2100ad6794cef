import BatonJSON
import Foundation
import TestSupport
import Testing

/// The cutover's duplicate on an identity server whose subject column is nullable (Directus' `external_identifier`,
/// Casdoor's `"user".apple`), checked with the server's own lookup: a user signed up again past Baton after the
/// acceptance, so a fresh row holds the new identifier; `baton exchange` records the pair, `baton report` lists it,
/// and `baton merge` releases the fresh row's subject (to the value `legacy.where` excludes, else NULL; nothing else of
/// the row changes, no row is deleted) and moves the identifier onto the original account.
struct ReleaseMerge {
    /// SQL: the account the server's login finds for `sub`; empty when none.
    var lookup: @Sendable (_ sub: String) -> String
    /// SQL: every row of the users table, as text (to prove no row is added or deleted).
    var rows: String
    /// What the fresh row's subject is released to: the value a `legacy.where` filter on the subject excludes (Casdoor's
    /// `''`), else NULL (nil: Directus' nullable `external_identifier`).
    var releasedTo: String?
    /// Whether the released row leaves `legacy.where` (Casdoor's `apple <> ''`); else it stays an Apple row without a
    /// subject (Directus' `provider = 'apple'`).
    var leavesAppleRows: Bool

    func run(_ framework: Framework) async throws {
        try await SchemaWorld.run(framework, apple: 2) { world in
            let person = world.people[0]
            let account = try world.psql(lookup(person.oldSub))
            let newEmail = try world.claims(try world.token(person.id))["email"]!.stringValue!
            _ = try world.psql(framework.addApple(50, person.newSub, newEmail))
            let fresh = try world.psql(lookup(person.newSub))
            #expect(!account.isEmpty && !fresh.isEmpty && fresh != account)
            let before = try world.psql(framework.invariant)
            let count = try world.count("SELECT count(*) FROM (\(rows)) AS r")
            let config = try world.configuration()
            let csv = world.directory.path("transfers.csv")
            try (["old_sub,transfer_sub"] + world.people.map { "\($0.oldSub),\($0.transferSub)" }).joined(separator: "\n")
                .write(toFile: csv, atomically: true, encoding: .utf8)
            #expect(try await runBatonOffPool(["import", "transfers", csv, "--config", config]).status == 0)

            // The exchange meets the pair (the fresh row holds the new identifier) and records it; the other user migrates.
            let exchange = try await runBatonOffPool(["exchange", "--config", config])
            #expect(exchange.stdout.contains("unresolvable 1,"), "\(exchange.stdout)\(exchange.stderr)")
            #expect(try world.count("SELECT count(*) FROM baton.duplicates WHERE merged_at IS NULL") == 1)
            #expect(try world.psql(lookup(person.newSub)) == fresh, "nothing moved before the merge")
            let report = try await runBatonOffPool(["report", "--format", "json", "--config", config])
            #expect(try JSON.parseObject(Array(report.stdout.utf8))["duplicates"]?["count"]?.intValue == 1, "\(report.stdout.suffix(600))")

            let merge = try await runBatonOffPool(["merge", "--yes", "--config", config])
            #expect(merge.status == 0 && merge.stdout.hasSuffix("merged 1; throttled 0.0 s (0%)\n"), "\(merge.stdout)\(merge.stderr)")
            // The server's login now finds the original account under the new identifier, and nothing under the old.
            #expect(try world.psql(lookup(person.newSub)) == account)
            #expect(try world.psql(lookup(person.oldSub)) == "")
            // The fresh row released its subject.
            let released = try world.psql(framework.appleRow(50))
            #expect(released.hasPrefix("|"), "\(released)")
            let recorded = try world.psql("SELECT coalesce(detail->>'released_subject', '<null>') FROM baton.events WHERE kind = 'duplicate_merged'")
            #expect(recorded == releasedTo ?? "<null>", "\(recorded)")
            let doctor = try await runBatonOffPool(["doctor", "--config", config])
            #expect(doctor.stdout.contains("ok    apple rows: legacy.where selects \(leavesAppleRows ? 2 : 3) rows"), "\(doctor.stdout)")
            #expect(try world.count("SELECT count(*) FROM (\(rows)) AS r") == count)
            #expect(try world.psql(framework.invariant) == before)
            let again = try await runBatonOffPool(["merge", "--yes", "--config", config])
            #expect(again.status == 0 && again.stdout == "merged 0; throttled 0.0 s (0%)\n", "\(again.stdout)")
        }
    }
}

/// `baton rehearse` on a framework's tables (20 Apple users, 3 of other providers) with its sample configuration:
/// every Apple row migrates by sign-in or exchange in the copy, no problem is found, and the source is unchanged.
enum SchemaRehearsal {
    static func run(_ framework: Framework) async throws {
        try await withDatabase("rehearse_\(framework.name)") { source in
            var sql = framework.ddl
            for i in 1...20 { sql += framework.addApple(i, RehearseCommandTests.sub(i), "a\(i)@privaterelay.appleid.com") + ";\n" }
            for i in 1...3 { sql += framework.addOther(100 + i, "10987654321\(i)", "g\(i)@gmail.com") + ";\n" }
            let script = sql
            _ = try await offPool { try TestDatabase.psql(source, script) }
            let config = try RehearseCommandTests.configuration(framework.legacy)
            let before = try await offPool { try RehearseCommandTests.digest(source) }
            let (result, output) = try await RehearseCommandTests().rehearse(config, source)
            #expect(try await offPool { try RehearseCommandTests.digest(source) } == before)
            let out = try #require(output, "\(result.stdout)\(result.stderr)")
            #expect(result.status == 0 && out.problems.isEmpty, "\(result.stdout)\(result.stderr)")
            #expect(out.selected == 20 && out.by_signin + out.by_exchange == 20, "\(result.stdout)")
        }
    }
}
