import BatonEmulator
import BatonJOSE
import BatonJSON
import Foundation
import TestSupport
import Testing

/// A transfer between two companies: the sender's database and the recipient's are two databases of one
/// cluster, and only transfer identifiers travel between them (`transfer-ids --export`, then the recipient's
/// rows with a NULL subject and the transfer identifier in `legacy.transfer_column`; `import transfers` in the
/// `key,transfer_sub` form is not needed, and changes nothing when run as well).
@Suite("Transfers between companies, through the built binary")
struct CrossCompanyTests {
    @Test("export without identifiers, recipient rows with NULL subjects, sign-in, report and exchange from the transfer column alone")
    func endToEnd() async throws {
        let emulator = try await AppleEmulator.start()
        let directory = try KeyDirectory()
        defer { directory.remove() }
        do {
            try await run(emulator, directory)
        } catch {
            await emulator.stop()
            throw error
        }
        await emulator.stop()
    }

    private func run(_ emulator: AppleEmulator, _ directory: KeyDirectory) async throws {
        let clientID = "com.example.app"
        let sender = try emulator.createTeam()
        let recipient = try emulator.createTeam()
        try emulator.createApp(clientID: clientID, teamID: sender.teamID)
        let users = try emulator.createUsers(clientID: clientID, count: 4, privateEmail: true)
        try emulator.initiateTransfer(clientID: clientID, toTeamID: recipient.teamID)
        try directory.write("sender.p8", sender.privateKeyPEM)
        try directory.write("recipient.p8", recipient.privateKeyPEM)

        // The sender's database: its users under the sending team's identifiers.
        let senderURL = try TestDatabase.create("xco_sender")
        #expect(try await runBatonOffPool(["db", "migrate", "--database-url", senderURL]).status == 0)
        _ = try TestDatabase.psql(senderURL, """
            CREATE TABLE public.users (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, apple_sub text UNIQUE, email text,
                                       display_name text, note text);
            INSERT INTO public.users (apple_sub, email, display_name, note)
            SELECT s, s || '@privaterelay.appleid.com', 'Name, ' || n, 'note ' || n
            FROM unnest('{\(users.map(\.userIdentifier).joined(separator: ","))}'::text[]) WITH ORDINALITY AS a(s, n);
            """)
        let senderConfig = try writeConfig(directory, "sender.json", databaseURL: senderURL, emulator: emulator, sender: sender,
                                           recipient: recipient, acceptedAt: nil, legacy: [
                                               "table": "public.users", "key_column": "id", "subject_column": "apple_sub", "email_column": "email",
                                           ])
        let ids = try await runBatonOffPool(["transfer-ids", "--config", senderConfig, "--yes", "--rate", "100"])
        #expect(ids.status == 0, "\(ids.stderr)")

        // The export: keys, transfer identifiers, the named columns; never an identifier or a relay address.
        let refused = try await runBatonOffPool(["transfer-ids", "--export", directory.path("bad.csv"), "--columns", "email", "--config", senderConfig])
        #expect(refused.status == 2, "\(refused.stderr)")
        let export = directory.path("export.csv")
        let exported = try await runBatonOffPool(["transfer-ids", "--export", export, "--columns", "display_name", "--config", senderConfig])
        #expect(exported.status == 0, "\(exported.stderr)")
        let text = try String(contentsOfFile: export, encoding: .utf8)
        let lines = text.split(separator: "\n").map(String.init)
        #expect(lines.first == "key,transfer_sub,display_name")
        #expect(lines.count == 5, "\(text)")
        for user in users { #expect(!text.contains(user.userIdentifier)) }
        #expect(!text.lowercased().contains("privaterelay"))
        #expect(text.contains("\"Name, 1\""), "a field with a comma is quoted")
        let transfers = try emulator.transferIdentifiers(clientID: clientID)
        let acceptedAt = try emulator.acceptTransfer(clientID: clientID)

        // The recipient's database: its own keys, the transfer identifier, no subject, no email.
        let recipientURL = try TestDatabase.create("xco_recipient")
        #expect(try await runBatonOffPool(["db", "migrate", "--database-url", recipientURL]).status == 0)
        var load = """
            CREATE TABLE public."user" ("id" text PRIMARY KEY, "appleSub" text UNIQUE, "email" text UNIQUE, "transferSub" text UNIQUE, "name" text);

            """
        for line in lines.dropFirst() {
            let fields = line.split(separator: ",", maxSplits: 2).map(String.init)
            let name = fields[2].trimmingCharacters(in: CharacterSet(charactersIn: "\""))
            load += "INSERT INTO public.\"user\" (\"id\", \"transferSub\", \"name\") VALUES ('acct-\(fields[0])', '\(fields[1])', '\(name)');\n"
        }
        _ = try TestDatabase.psql(recipientURL, load)
        let recipientConfig = try writeConfig(directory, "recipient.json", databaseURL: recipientURL, emulator: emulator, sender: sender,
                                              recipient: recipient, acceptedAt: acceptedAt, legacy: [
                                                  "table": "public.user", "key_column": "id", "subject_column": "appleSub", "email_column": "email",
                                                  "transfer_column": "transferSub", "email_policy": "always",
                                              ])

        // A sign-in carrying transfer_sub finds the row from the transfer identifier alone.
        let first = users[0]
        let authorization = try emulator.authorize(clientID: clientID, user: first.id)
        let claims = try CompactJWS.parse(authorization.idToken).claims()
        #expect(claims["transfer_sub"]?.stringValue == transfers[first.userIdentifier])
        let port = try freeLoopbackPort()
        let serveConfig = try writeConfig(directory, "serve.json", databaseURL: recipientURL, emulator: emulator, sender: sender,
                                          recipient: recipient, acceptedAt: acceptedAt, port: port, legacy: [
                                              "table": "public.user", "key_column": "id", "subject_column": "appleSub", "email_column": "email",
                                              "transfer_column": "transferSub", "email_policy": "always",
                                          ])
        let process = try runProcessAsync(batonBinaryPath, ["serve", "--config", serveConfig])
        var up = false
        for _ in 0..<200 where !up {
            up = await SchemaHTTP.status("GET", port: port, path: "/healthz") == 200
            if !up { try await Task.sleep(for: .milliseconds(50)) }
        }
        #expect(up)
        let answer = await SchemaHTTP.signIn(port: port, token: authorization.idToken)
        #expect(answer.status == 200 && answer.outcome == "migrated", "\(answer)")
        process.signal(SIGTERM)
        let served = try await offPool { try process.wait(timeout: 30) }
        #expect(!served.stderr.contains("status=500"), "\(served.stderr)")
        let row = try TestDatabase.psql(recipientURL, "SELECT \"appleSub\" || '|' || \"email\" FROM public.\"user\" WHERE \"transferSub\" = '\(transfers[first.userIdentifier]!)'")
        #expect(row == "\(authorization.userIdentifier)|\(claims["email"]!.stringValue!)")

        // The report counts and lists the users still pending by their transfer identifiers, with the recipient's
        // keys, from the transfer column alone.
        let pending = try await runBatonOffPool(["report", "--format", "json", "--config", recipientConfig])
        #expect(pending.status == 0, "\(pending.stderr)")
        let before = try JSON.parseObject(Array(pending.stdout.utf8))
        #expect(before["totals"]?["migrated"]?.intValue == 1 && before["totals"]?["pending"]?.intValue == 3, "\(pending.stdout.prefix(600))")
        #expect(before["totals"]?["total"]?.intValue == 4)
        let listed = before["unresolved"]?["users"]?.arrayValue ?? []
        #expect(listed.count == 3, "\(pending.stdout.prefix(600))")
        #expect(listed.allSatisfy { $0["legacy_key"]?.stringValue?.hasPrefix("acct-") == true && $0["state"]?.stringValue == "pending" })
        #expect(Set(listed.compactMap { $0["old_sub"]?.stringValue }) == Set(users.dropFirst().map { transfers[$0.userIdentifier]! }))

        // A team that also imports some of them as key,transfer_sub (the earlier way) gets no second row.
        let csv = directory.path("keys.csv")
        try (["key,transfer_sub"] + lines.dropFirst(2).prefix(2).map { line in
            let fields = line.split(separator: ",").map(String.init)
            return "acct-\(fields[0]),\(fields[1])"
        }).joined(separator: "\n").write(toFile: csv, atomically: true, encoding: .utf8)
        let imported = try await runBatonOffPool(["import", "transfers", csv, "--config", recipientConfig])
        #expect(imported.status == 0, "\(imported.stdout)\(imported.stderr)")

        // The exchange queues the rest from the transfer column and migrates everyone.
        let exchange = try await runBatonOffPool(["exchange", "--config", recipientConfig])
        #expect(exchange.status == 0, "\(exchange.stdout)\(exchange.stderr)")
        #expect(exchange.stdout.contains("done 3,") && exchange.stdout.contains("remaining 0"), "\(exchange.stdout)")
        #expect(try TestDatabase.psql(recipientURL, "SELECT count(*) FROM baton.transfers") == "4")
        #expect(try TestDatabase.psql(recipientURL, "SELECT count(DISTINCT legacy_key) FROM baton.transfers WHERE legacy_key LIKE 'acct-%'") == "4")
        #expect(try TestDatabase.psql(recipientURL, "SELECT count(*) FROM public.\"user\" WHERE \"appleSub\" IS NOT NULL") == "4")
        #expect(try TestDatabase.psql(recipientURL, "SELECT count(*) FROM baton.transfers WHERE state = 'migrated' AND old_sub IS NULL") == "4")
        #expect(try TestDatabase.psql(recipientURL, "SELECT count(*) FROM baton.events WHERE kind = 'migrated'") == "4")
        for user in users {
            #expect(try TestDatabase.psql(recipientURL, "SELECT count(*) FROM public.\"user\" WHERE \"appleSub\" = '\(user.userIdentifier)'") == "0",
                    "the sender's identifier never reaches the recipient")
        }

        let report = try await runBatonOffPool(["report", "--format", "json", "--config", recipientConfig])
        #expect(report.status == 0, "\(report.stderr)")
        let json = try JSON.parseObject(Array(report.stdout.utf8))
        #expect(json["totals"]?["migrated"]?.intValue == 4)
        #expect(json["totals"]?["total"]?.intValue == 4)
    }

    private func writeConfig(_ directory: KeyDirectory, _ name: String, databaseURL: String, emulator: AppleEmulator, sender: TeamCredentials,
                             recipient: TeamCredentials, acceptedAt: Date?, port: Int = 0, legacy: [String: Any]) throws -> String {
        var transfer: [String: Any] = [
            "client_id": "com.example.app",
            "sender": ["team_id": sender.teamID, "key_id": sender.keyID, "private_key_path": "sender.p8"],
            "recipient": ["team_id": recipient.teamID, "key_id": recipient.keyID, "private_key_path": "recipient.p8"],
        ]
        if let acceptedAt { transfer["accepted_at"] = ISO8601DateFormatter().string(from: acceptedAt) }
        let tree: [String: Any] = [
            "listen": "127.0.0.1:\(port)",
            "database": ["url": databaseURL, "pool_size": 4],
            "apple": ["base_url": emulator.baseURL.absoluteString, "client_ids": ["com.example.app"], "transfer": transfer],
            "legacy": legacy,
        ]
        try directory.write(name, String(decoding: try JSONSerialization.data(withJSONObject: tree), as: UTF8.self))
        return directory.path(name)
    }
}
