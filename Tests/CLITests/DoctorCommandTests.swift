import BatonEmulator
import Foundation
import TestSupport
import Testing

@Suite("baton doctor")
struct DoctorCommandTests {
    /// The application's table, and one without a unique subject.
    static let tables = """
        CREATE TABLE public.users (id bigserial PRIMARY KEY, apple_sub text NOT NULL UNIQUE, email text);
        CREATE TABLE public.loose_users (id bigserial PRIMARY KEY, apple_sub text NOT NULL, email text);
        """

    @Test("a good configuration passes every check")
    func goodConfiguration() async throws {
        try await CommandFixture.run(users: 2, database: .bare(sql: DoctorCommandTests.tables)) { fixture in
            try await fixture.migrate()
            let result = try await runBatonOffPool(["doctor", "--config", try fixture.configuration()])
            #expect(result.status == 0, "\(result.stdout)\(result.stderr)")
            let lines = result.stdout.split(separator: "\n").map(String.init)
            #expect(!lines.contains { $0.hasPrefix("FAIL") }, "\(result.stdout)")
            for check in ["configuration", "sender key", "sender secret", "recipient key", "recipient secret", "transfer window",
                          "key set", "database", "schema", "legacy table", "subject uniqueness"] {
                #expect(lines.contains { $0.hasPrefix("ok    \(check):") }, "no ok line for \(check) in:\n\(result.stdout)")
            }
            #expect(lines.contains { $0.contains("60 days left") || $0.contains("59 days left") })
            #expect(lines.contains { $0.hasPrefix("ok    client secrets: Baton signs its own") && ($0.contains("--days 60") || $0.contains("--days 61")) })
            #expect(lines.last == "doctor: 0 failed, 0 warnings")
            #expect(!result.stdout.contains("PRIVATE KEY"))
        }
    }

    @Test("a broken configuration fails each broken check with a fix")
    func brokenConfiguration() async throws {
        try await CommandFixture.run(users: 2, database: .bare(sql: DoctorCommandTests.tables)) { fixture in
            // Not migrated; the recipient's team with the sender's key; the window closed; a table without a
            // unique subject; a column that does not exist.
            let path = try fixture.configuration { tree, transfer in
                transfer["recipient"] = ["team_id": fixture.recipient.teamID, "key_id": fixture.sender.keyID, "private_key_path": "sender.p8"]
                transfer["accepted_at"] = ISO8601DateFormatter().string(from: Date().addingTimeInterval(-100 * 86_400))
                tree["legacy"] = ["table": "public.loose_users", "key_column": "id", "subject_column": "apple_sub", "email_column": "mail"]
            }
            let result = try await runBatonOffPool(["doctor", "--config", path])
            #expect(result.status == 1)
            let failures = result.stdout.split(separator: "\n").filter { $0.hasPrefix("FAIL") }.map(String.init)
            #expect(failures.allSatisfy { $0.contains("; fix: ") }, "\(failures)")
            func failure(_ check: String) -> String? { failures.first { $0.hasPrefix("FAIL  \(check):") } }
            #expect(failure("recipient secret")?.contains("invalid_client") == true, "\(result.stdout)")
            // The sender's key under the recipient's team ID: doctor finds Apple accepts it under the sender's.
            #expect(failure("recipient secret")?.contains("likely cause: key \(fixture.sender.keyID) is registered to team \(fixture.sender.teamID) (the sender's), not to team \(fixture.recipient.teamID)") == true)
            #expect(failure("recipient secret")?.contains("exchanges need the recipient team's key") == true)
            #expect(failure("credentials")?.contains("the sender and the recipient use the same key") == true)
            #expect(failure("transfer window")?.contains("closed") == true)
            #expect(failure("schema")?.contains("baton db migrate") == true)
            #expect(failure("legacy table")?.contains("legacy.email_column mail") == true)
            #expect(result.stdout.contains("ok    sender secret"))
            #expect(result.stdout.contains("doctor: 5 failed"))
        }
    }

    @Test("the key in the wrong team, both ways, and invalid_client the window explains: each named as its likely cause")
    func keyInTheWrongTeam() async throws {
        try await CommandFixture.run(users: 2, database: .bare(sql: DoctorCommandTests.tables)) { fixture in
            try await fixture.migrate()
            // After acceptance the app is team B's; the sender's entry has team A's ID but team B's key.
            let reverse = try fixture.configuration("reverse.json") { _, transfer in
                transfer["sender"] = ["team_id": fixture.sender.teamID, "key_id": fixture.recipient.keyID, "private_key_path": "recipient.p8"]
            }
            let first = try await runBatonOffPool(["doctor", "--config", reverse])
            #expect(first.status == 1)
            #expect(first.stdout.contains("FAIL  sender secret: Apple rejected"), "\(first.stdout)")
            #expect(first.stdout.contains("likely cause: key \(fixture.recipient.keyID) is registered to team \(fixture.recipient.teamID) (the recipient's), not to team \(fixture.sender.teamID)"), "\(first.stdout)")
            #expect(first.stdout.contains("transfer identifiers need the sender team's key"))

            // An app team A has not transferred: the recipient's right key is refused until the acceptance, which it waits for.
            try fixture.emulator.createApp(clientID: "com.example.other", teamID: fixture.sender.teamID)
            let early = try fixture.configuration("early.json") { tree, transfer in
                tree["apple"] = ["base_url": fixture.emulator.baseURL.absoluteString, "client_ids": ["com.example.other"]]
                transfer["client_id"] = "com.example.other"
                transfer["accepted_at"] = nil
            }
            let second = try await runBatonOffPool(["doctor", "--config", early])
            #expect(second.stdout.contains("ok    sender secret"), "\(second.stdout)")
            #expect(second.stdout.contains("WAIT  recipient secret: Apple rejected"), "\(second.stdout)")
            #expect(second.stdout.contains("the app is not transferred to this team yet"), "\(second.stdout)")

            // Day 61 (on the emulator's clock and in accepted_at): the sender's right key is refused, the app is no longer team A's.
            try fixture.emulator.advanceClock(by: 61 * 86_400)
            let late = try fixture.configuration("late.json") { _, transfer in
                transfer["accepted_at"] = ISO8601DateFormatter().string(from: fixture.acceptedAt!.addingTimeInterval(-61 * 86_400))
                transfer["recipient"] = nil
            }
            let third = try await runBatonOffPool(["doctor", "--config", late])
            #expect(third.stdout.contains("FAIL  sender secret: Apple rejected"), "\(third.stdout)")
            #expect(third.stdout.contains("likely cause: the app is no longer this team's"), "\(third.stdout)")
        }
    }

    @Test("a table without a unique subject fails with the index to create")
    func missingUniqueConstraint() async throws {
        try await CommandFixture.run(users: 2, database: .bare(sql: DoctorCommandTests.tables)) { fixture in
            try await fixture.migrate()
            let path = try fixture.configuration { tree, _ in
                tree["legacy"] = ["table": "public.loose_users", "key_column": "id", "subject_column": "apple_sub", "email_column": "email"]
            }
            let result = try await runBatonOffPool(["doctor", "--config", path])
            #expect(result.status == 1)
            #expect(result.stdout.contains(#"FAIL  subject uniqueness: public.loose_users.apple_sub has no unique constraint"#), "\(result.stdout)")
            #expect(result.stdout.contains(#"CREATE UNIQUE INDEX CONCURRENTLY ON "public"."loose_users" ("apple_sub")"#))
        }
    }

    @Test("unreadable and non-P-256 keys fail the key check; Apple is then not asked")
    func badKeyFiles() async throws {
        try await CommandFixture.run(users: 2, database: .bare(sql: DoctorCommandTests.tables)) { fixture in
            try await fixture.migrate()
            try fixture.directory.openssl(["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-384", "-out", fixture.directory.path("p384.p8")])
            let path = try fixture.configuration { _, transfer in
                transfer["sender"] = ["team_id": fixture.sender.teamID, "key_id": fixture.sender.keyID, "private_key_path": "absent.p8"]
                transfer["recipient"] = ["team_id": fixture.recipient.teamID, "key_id": fixture.recipient.keyID, "private_key_path": "p384.p8"]
            }
            fixture.emulator.resetStats()
            let result = try await runBatonOffPool(["doctor", "--config", path])
            #expect(result.status == 1)
            #expect(result.stdout.contains("FAIL  sender key: cannot read the private key"), "\(result.stdout)")
            #expect(result.stdout.contains("FAIL  recipient key: the private key is not an EC P-256"))
            #expect(fixture.emulator.stats()["/auth/token"].calls == 0)
        }
    }

    @Test("team IDs: a numeric provider ID and the same team on both sides are named as such, exit 2")
    func teamIDSlips() async throws {
        try await CommandFixture.run(users: 1, database: .bare(sql: DoctorCommandTests.tables)) { fixture in
            let numeric = try fixture.configuration("numeric.json") { _, transfer in
                transfer["recipient"] = ["team_id": "118234567", "key_id": fixture.recipient.keyID, "private_key_path": "recipient.p8"]
            }
            let same = try fixture.configuration("same.json") { _, transfer in
                transfer["recipient"] = ["team_id": fixture.sender.teamID, "key_id": fixture.recipient.keyID, "private_key_path": "recipient.p8"]
            }
            let first = try await runBatonOffPool(["doctor", "--config", numeric])
            #expect(first.status == 2)
            #expect(first.stdout.contains("FAIL  configuration: apple.transfer.recipient.team_id") && first.stdout.contains("App Store Connect's provider ID"), "\(first.stdout)")
            let second = try await runBatonOffPool(["doctor", "--config", same])
            #expect(second.status == 2)
            #expect(second.stdout.contains("the sender is the team the app leaves, the recipient the team it joins"), "\(second.stdout)")
        }
    }

    @Test("pre-flight: the transfer's client ID missing from client_ids, subjects mostly NULL, relay addresses, duplicates waiting")
    func preflight() async throws {
        let tables = DoctorCommandTests.tables + """
            CREATE TABLE public.sparse (id bigserial PRIMARY KEY, apple_sub text UNIQUE, email text);
            INSERT INTO public.sparse (apple_sub, email) VALUES ('s.1', 'a@example.org'), (NULL, 'b@privaterelay.appleid.com'), (NULL, NULL), (NULL, 'c@example.org');
            """
        try await CommandFixture.run(users: 1, database: .bare(sql: tables)) { fixture in
            try await fixture.migrate()
            _ = try TestDatabase.psql(fixture.databaseURL, "INSERT INTO baton.duplicates (fresh_key, legacy_key, new_sub, found_by) VALUES ('2', '1', 'n.1', 'signin')")
            let path = try fixture.configuration { tree, _ in
                var apple = tree["apple"] as! [String: Any]
                apple["client_ids"] = ["com.example.other"]
                tree["apple"] = apple
                tree["legacy"] = ["table": "public.sparse", "key_column": "id", "subject_column": "apple_sub", "email_column": "email"]
            }
            let result = try await runBatonOffPool(["doctor", "--config", path])
            #expect(result.status == 0, "\(result.stdout)")
            let lines = result.stdout.split(separator: "\n").map(String.init)
            #expect(lines.contains { $0.hasPrefix("warn  transfer client ID:") && $0.contains("not among apple.client_ids") }, "\(result.stdout)")
            #expect(lines.contains { $0.hasPrefix("warn  apple subjects: 3 of 4 Apple rows have no Apple subject: no sign-in or exchange") && $0.contains("POST /v1/link") })
            #expect(lines.contains { $0.hasPrefix("warn  duplicates: 1 users have a second record") && $0.contains("baton merge --dry-run") })
            #expect(lines.contains { $0.hasPrefix("warn  relay email: 1 users have a private relay address") && $0.contains("550 5.1.1")
                && $0.contains("register the receiving team's sending domains and addresses (SPF, DKIM)") })
            #expect(lines.last == "doctor: 0 failed, 4 warnings")
        }
    }

    @Test("an invalid configuration exits 2 naming the key")
    func invalidConfiguration() async throws {
        let directory = try KeyDirectory()
        defer { directory.remove() }
        try directory.write("baton.json", #"{"database":{"url":"postgresql:///x"},"apple":{"client_ids":["AAAAAAAAAA.com.example.app"]},"legacy":{"table":"users","key_column":"id","subject_column":"sub","email_column":"email"}}"#)
        let result = try await runBatonOffPool(["doctor", "--config", directory.path("baton.json")])
        #expect(result.status == 2)
        #expect(result.stdout.contains("FAIL  configuration: apple.client_ids[0] (BATON_APPLE_CLIENT_IDS)"), "\(result.stdout)")
    }
}
