import BatonJSON
import Foundation
import TestSupport
import Testing

extension Framework {
    /// Rails with OmniAuth as a newcomer has it: the users' email a `citext` column (Devise's usual type, an
    /// extension's type), identities of Apple and Google.
    static var railsCitext: Framework {
        var framework = Framework.omniauth
        framework.ddl = "CREATE EXTENSION IF NOT EXISTS citext;\n"
            + framework.ddl.replacingOccurrences(of: "\"email\" character varying DEFAULT '' NOT NULL", with: "\"email\" citext DEFAULT '' NOT NULL")
        return framework
    }
}

/// The runbook walked end to end by its own commands, on a newcomer's schema (an identity table, the email in the
/// users table with an extension type, another provider's rows, one holding an Apple user's old identifier): the
/// sender's walk with the recipient named by team alone, the service deployed before acceptance and told of it by
/// SIGHUP, a sign-in answering the account's key, the exchange, the report, a rollback and the exchange again.
@Suite("the runbook, walked on a Rails schema with a citext email")
struct RunbookWalkTests {
    @Test("sender's walk, serve before acceptance, SIGHUP, sign-in, exchange, report, rollback, exchange again; other rows untouched")
    func walk() async throws {
        try await SchemaWorld.run(.railsCitext, apple: 3) { world in
            #expect(try world.psql("SELECT data_type || ':' || udt_name FROM information_schema.columns WHERE table_name = 'users' AND column_name = 'email'")
                    == "USER-DEFINED:citext")
            // The world's Google identities hold the Apple users' old identifiers as their own uid.
            #expect(try world.count("SELECT count(*) FROM identities WHERE provider <> 'apple' AND uid = '\(world.people[0].oldSub)'") == 1)
            let invariant = try world.psql(world.framework.invariant)

            // Team A: its own key, team B named by its ID.
            let sender = try world.configuration(recipientKey: false)
            let dryRun = try await runBatonOffPool(["transfer-ids", "--dry-run", "--config", sender])
            #expect(dryRun.status == 0, "\(dryRun.stdout)\(dryRun.stderr)")
            let ids = try await runBatonOffPool(["transfer-ids", "--yes", "--rate", "100", "--config", sender])
            #expect(ids.status == 0 && ids.stdout.contains("done 3,"), "\(ids.stdout)\(ids.stderr)")

            // Team B deploys the service before acceptance: no accepted_at yet.
            let port = try freeLoopbackPort()
            let config = try world.configuration(port: port)
            let accepted = try String(contentsOfFile: config, encoding: .utf8)
            var tree = try #require(try JSONSerialization.jsonObject(with: Data(accepted.utf8)) as? [String: Any])
            var apple = tree["apple"] as! [String: Any]
            var transfer = apple["transfer"] as! [String: Any]
            transfer.removeValue(forKey: "accepted_at")
            apple["transfer"] = transfer
            tree["apple"] = apple
            try String(decoding: try JSONSerialization.data(withJSONObject: tree), as: UTF8.self).write(toFile: config, atomically: true, encoding: .utf8)
            let serve = try runProcessAsync(batonBinaryPath, ["serve", "--config", config])
            var up = false
            for _ in 0..<200 where !up {
                up = await SchemaHTTP.status("GET", port: port, path: "/healthz") == 200
                if !up { try await Task.sleep(for: .milliseconds(50)) }
            }
            #expect(up)
            let person = world.people[0]
            #expect(try await world.credentialState(port: port, user: person.oldSub) == "authorized")

            // Acceptance: accepted_at set, the running service told by SIGHUP.
            try accepted.write(toFile: config, atomically: true, encoding: .utf8)
            serve.signal(SIGHUP)
            var state: String?
            for _ in 0..<100 where state != "transferred" {
                state = try await world.credentialState(port: port, user: person.oldSub)
                if state != "transferred" { try await Task.sleep(for: .milliseconds(50)) }
            }
            #expect(state == "transferred")

            // The person signs in: migrated, and the answer names the account (the users row), not the identity row.
            let answer = await SchemaHTTP.signIn(port: port, token: try world.token(person.id))
            #expect(answer.status == 200 && answer.outcome == "migrated", "\(answer)")
            let newEmail = try world.claims(try world.token(person.id))["email"]!.stringValue!
            let accountKey = try #require(answer.accountKey, "\(answer)")
            #expect(try world.psql("SELECT email FROM users WHERE id = \(accountKey)") == newEmail)
            #expect(try world.psql("SELECT user_id::text FROM identities WHERE id = \(answer.key ?? "0")") == accountKey)
            serve.signal(SIGTERM)
            let served = try await offPool { try serve.wait(timeout: 30) }
            #expect(served.status == 0)

            // The exchange takes the two who did not sign in; the report counts all three.
            let exchange = try await runBatonOffPool(["exchange", "--config", config])
            #expect(exchange.status == 0 && exchange.stdout.contains("done 2,"), "\(exchange.stdout)\(exchange.stderr)")
            let report = try JSON.parseObject(Array(try await runBatonOffPool(["report", "--format", "json", "--config", config]).stdout.utf8))
            #expect(report["totals"]?["migrated"]?.intValue == 3, "\(report["totals"] ?? .null)")

            // One of them rolled back (the identity row's key), then migrated again by the exchange.
            let key = try world.psql("SELECT legacy_key FROM baton.events WHERE kind = 'migrated' AND method = 'exchange' ORDER BY id LIMIT 1")
            let preview = try await runBatonOffPool(["rollback", "--legacy-key", key, "--dry-run", "--config", config])
            #expect(preview.status == 0 && preview.stdout.hasSuffix("would roll back 1\n"), "\(preview.stdout)\(preview.stderr)")
            let rollback = try await runBatonOffPool(["rollback", "--legacy-key", key, "--yes", "--config", config])
            #expect(rollback.status == 0 && rollback.stdout.hasSuffix("rolled back 1, refused 0\n"), "\(rollback.stdout)\(rollback.stderr)")
            #expect(try world.count("SELECT count(*) FROM baton.transfers WHERE state = 'pending'") == 1)
            let again = try await runBatonOffPool(["exchange", "--config", config])
            #expect(again.status == 0 && again.stdout.contains("done 1,"), "\(again.stdout)\(again.stderr)")
            #expect(try world.count("SELECT count(*) FROM baton.transfers WHERE state = 'migrated'") == 3)
            #expect(try world.psql(world.framework.invariant) == invariant)
        }
    }
}
