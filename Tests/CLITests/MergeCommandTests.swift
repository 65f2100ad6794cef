import BatonJSON
import Foundation
import TestSupport
import Testing

/// The cutover's duplicates on each framework's tables, through the built binary: a user signed in past Baton
/// after acceptance and got a second Apple row under the new identifier; `baton exchange` meets the pair and
/// records it, `baton report` lists it, `baton merge` moves the identifier onto the real row.
enum MergeScenario {
    /// With `busy`, two other client backends are active while `baton merge --max-active-backends 1` runs: it waits
    /// (the pair stays unmerged) until they end, then merges it.
    static func run(_ framework: Framework, sameAccount: Bool = false, busy: Bool = false) async throws {
        try await SchemaWorld.run(framework, apple: 2) { world in
            let table = (framework.legacy["table"] as! String).split(separator: ".").map { "\"\($0)\"" }.joined(separator: ".")
            try world.addMissingSubjectIndex()
            let person = world.people[0]
            let newEmail = try world.claims(try world.token(person.id))["email"]!.stringValue!
            if sameAccount {
                // Supabase Auth links the new identity to the user whose verified email matches: one account, two rows.
                _ = try world.psql("""
                    INSERT INTO auth.identities (provider_id, user_id, identity_data, provider, created_at)
                    SELECT '\(person.newSub)', user_id, jsonb_build_object('sub', '\(person.newSub)', 'provider_id', '\(person.newSub)'), 'apple', now()
                    FROM auth.identities WHERE provider_id = '\(person.oldSub)' AND provider = 'apple'
                    """)
            } else {
                _ = try world.psql(framework.addApple(50, person.newSub, newEmail))
            }
            let before = try world.psql(framework.invariant)
            let config = try world.configuration()
            // The sender's walk finds no transfer identifier for the fresh row (its subject is the receiving team's).
            let ids = try await runBatonOffPool(["transfer-ids", "--yes", "--rate", "100", "--config", config])
            #expect(ids.stdout.contains("done 2,") && ids.stdout.contains("unresolvable 1,"), "\(ids.stdout)\(ids.stderr)")
            let subject = framework.legacy["subject_column"] as! String
            let filter = (framework.legacy["where"] as! [String: String]).map { "\"\($0.key)\" = '\($0.value)'" }.joined(separator: " AND ")
            /// The subjects of the Apple rows holding the old or new identifier, or a released one, sorted.
            func subjects() throws -> String {
                try world.psql("""
                    SELECT string_agg("\(subject)", ',' ORDER BY "\(subject)") FROM \(table)
                    WHERE "\(subject)" IN ('\(person.oldSub)', '\(person.newSub)', 'baton-released:\(person.newSub)') AND \(filter)
                    """)
            }
            let pairSubjects = [person.oldSub, person.newSub].sorted().joined(separator: ",")

            // The duplicate's exchange is unresolvable (legacy.on_duplicate report): the pair is recorded, nothing moves.
            let exchange = try await runBatonOffPool(["exchange", "--config", config])
            #expect(exchange.status == 1 && exchange.stdout.contains("done 1,") && exchange.stdout.contains("unresolvable 1,"), "\(exchange.stdout)\(exchange.stderr)")
            #expect(try world.psql(framework.appleRow(1)).hasPrefix(world.people[1].newSub + "|"))
            #expect(try subjects() == pairSubjects)

            let report = try await runBatonOffPool(["report", "--format", "json", "--config", config])
            let duplicates = try JSON.parseObject(Array(report.stdout.utf8))["duplicates"]
            #expect(duplicates?["count"]?.intValue == 1, "\(report.stdout.suffix(600))")
            let item = duplicates?["items"]?.arrayValue?.first
            #expect(item?["found_by"]?.stringValue == "exchange" && item?["merged"]?.boolValue == false)
            let text = try await runBatonOffPool(["report", "--config", config])
            #expect(text.stdout.contains("Duplicates (1; 1 waiting for baton merge)"), "\(text.stdout)")

            let dryRun = try await runBatonOffPool(["merge", "--dry-run", "--config", config])
            #expect(dryRun.status == 0 && dryRun.stdout.hasSuffix("would merge 1\n"), "\(dryRun.stdout)\(dryRun.stderr)")
            #expect(try subjects() == pairSubjects, "a dry run changes nothing")

            let merge: ProcessResult
            if busy {
                let backends = try await BusyBackends(2, on: world.databaseURL)
                let running = try runProcessAsync(batonBinaryPath, ["merge", "--yes", "--max-active-backends", "1", "--config", config])
                for _ in 0..<4 {
                    try await Task.sleep(for: .seconds(1))
                    #expect(try world.count("SELECT count(*) FROM baton.duplicates WHERE merged_at IS NULL") == 1, "merged while the database was busy")
                }
                try await backends.end()
                merge = try await offPool { try running.wait(timeout: 120) }
                #expect(merge.stderr.contains("throttled: active backends"), "\(merge.stderr)")
                let throttled = merge.stdout.components(separatedBy: "merged 1; throttled ").last.flatMap { Double($0.prefix { $0 == "." || $0.isNumber }) } ?? -1
                #expect(merge.status == 0 && throttled >= 3, "\(merge.stdout)\(merge.stderr)")
            } else {
                merge = try await runBatonOffPool(["merge", "--yes", "--config", config])
                #expect(merge.status == 0 && merge.stdout.hasSuffix("merged 1; throttled 0.0 s (0%)\n"), "\(merge.stdout)\(merge.stderr)")
            }
            #expect(merge.stdout.contains("nothing for the application to move") == sameAccount, "\(merge.stdout)")
            // Every framework's subject column is NOT NULL: the fresh row keeps a marker, nothing else of it changes.
            #expect(try subjects() == [person.newSub, "baton-released:\(person.newSub)"].sorted().joined(separator: ","))
            if !sameAccount {
                let row = try world.psql(framework.appleRow(0))
                #expect(row.hasPrefix(person.newSub + "|"), "\(row)")
                for key in framework.jsonSubjectKeys {
                    let json = try JSON.parseObject(Array(row.split(separator: "|", omittingEmptySubsequences: false)[2].utf8))
                    #expect(json[key]?.stringValue == person.newSub, "\(key) in \(row)")
                }
            }
            #expect(try world.count("SELECT count(*) FROM baton.events WHERE kind = 'duplicate_merged'") == 1)
            // Other providers' rows, the other columns and JSON keys, every users row but the emails Baton may write.
            #expect(try world.psql(framework.invariant) == before)
            let again = try await runBatonOffPool(["merge", "--yes", "--config", config])
            #expect(again.status == 0 && again.stdout == "merged 0; throttled 0.0 s (0%)\n", "\(again.stdout)")
        }
    }
}

@Suite("baton merge, on each framework's tables")
struct MergeCommandTests {
    @Test("without --dry-run or --yes, or with both: usage error, exit 2")
    func usage() throws {
        for flags in [[], ["--dry-run", "--yes"]] {
            let result = try runBaton(["merge"] + flags + ["--config", "/nonexistent/baton.json"])
            #expect(result.status == 2)
            #expect(result.stderr.contains("--dry-run") && result.stderr.contains("--yes"), "\(result.stderr)")
        }
    }

    @Test("exchange records the pair, report lists it, merge moves the identifier; other rows untouched",
          arguments: ["allauth", "authjs", "better-auth", "omniauth", "supabase"])
    func frameworks(_ name: String) async throws {
        let frameworks = [Framework.allauth, .authjs, .betterAuth, .omniauth, .supabase]
        try await MergeScenario.run(try #require(frameworks.first { $0.name == name }))
    }

    @Test("client backends busy: merge --max-active-backends waits before the pair, and merges it once they end")
    func busyDatabase() async throws {
        try await MergeScenario.run(.authjs, busy: true)
    }

    @Test("Supabase Auth: both identity rows under one user; merged with nothing for the application to do")
    func supabaseOneAccount() async throws {
        try await MergeScenario.run(.supabase, sameAccount: true)
    }
}
