import BatonEmulator
import BatonJOSE
import BatonJSON
import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import TestSupport
import Testing

/// An auth framework's tables as the framework creates them, and how Baton is pointed at them.
struct Framework {
    /// Its name, also the sample configuration's (`sample-config/<name>.json`).
    var name: String
    /// The DDL, with the framework's own constraints, quoting and key types.
    var ddl: String
    /// Inserts an Apple user (identity row and users row) with `sub` and `email`; `i` numbers users.
    var addApple: @Sendable (_ i: Int, _ sub: String, _ email: String) -> String
    /// Inserts a user of another provider whose subject is `uid` (colliding with an Apple one) and email `email`.
    var addOther: @Sendable (_ i: Int, _ uid: String, _ email: String) -> String
    /// SQL: the Apple row's subject, email and JSON copy (`sub|email|json`) for the Apple row whose key
    /// leads to the user numbered `i`.
    var appleRow: @Sendable (_ i: Int) -> String
    /// SQL: the application's own change of the email of the user numbered `i`.
    var setEmail: @Sendable (_ i: Int, _ email: String) -> String
    /// SQL: a digest of everything Baton must never change (other providers' rows, other columns, other JSON keys).
    var invariant: String
    /// SQL: the address of the user numbered `i` in the framework's further copy of the email, if it keeps one
    /// (`legacy.email_copies`' primary row, or a JSON copy in the users table).
    var emailCopy: (@Sendable (_ i: Int) -> String)? = nil
    /// The JSON keys holding the subject in the JSON copy (none without one).
    var jsonSubjectKeys: [String] = []
    /// Whether the framework's tables come with a unique index over the provider and subject columns.
    var hasSubjectIndex = true

    /// The `legacy` section of `sample-config/<name>.json`: the samples are what the tests run.
    var legacy: [String: Any] {
        let path = packageRoot.appendingPathComponent("sample-config/\(name).json").path
        let tree = (try? JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: path)))) as? [String: Any]
        return (tree?["legacy"] as? [String: Any])?.filter { !($0.value is NSNull) } ?? [:]
    }
}

/// A transfer on a live emulator: `apple` users of the app whose rows are in `framework`'s tables under their
/// sending-team identifiers (with users of another provider whose subjects collide with theirs), one more
/// user of the app who has no row, the teams' keys on disk, and a configuration naming all of it.
struct SchemaWorld {
    static let clientID = "com.example.app"
    let framework: Framework
    let emulator: AppleEmulator
    let directory: KeyDirectory
    let sender: TeamCredentials
    let recipient: TeamCredentials
    let databaseURL: String
    let acceptedAt: Date
    /// The users with rows: their emulator IDs, old and new subjects, transfer identifiers.
    let people: [(id: String, oldSub: String, newSub: String, transferSub: String, email: String)]
    /// A user of the app without a row (whose `transfer_sub` Baton cannot resolve).
    let stranger: String

    static func run(_ framework: Framework, apple count: Int, _ body: (SchemaWorld) async throws -> Void) async throws {
        let emulator = try await AppleEmulator.start()
        let directory = try KeyDirectory()
        do {
            let sender = try emulator.createTeam()
            let recipient = try emulator.createTeam()
            try emulator.createApp(clientID: clientID, teamID: sender.teamID)
            let users = try emulator.createUsers(clientID: clientID, count: count + 1, privateEmail: true)
            try emulator.initiateTransfer(clientID: clientID, toTeamID: recipient.teamID)
            let transfers = try emulator.transferIdentifiers(clientID: clientID)
            let acceptedAt = try emulator.acceptTransfer(clientID: clientID)
            try directory.write("sender.p8", sender.privateKeyPEM)
            try directory.write("recipient.p8", recipient.privateKeyPEM)
            var people: [(id: String, oldSub: String, newSub: String, transferSub: String, email: String)] = []
            for user in users.prefix(count) {
                let newSub = try emulator.authorize(clientID: clientID, user: user.id).userIdentifier
                people.append((user.id, user.userIdentifier, newSub, transfers[user.userIdentifier]!, user.email))
            }
            let databaseURL = try TestDatabase.create("schema_\(framework.name)")
            let migrate = try await runBatonOffPool(["db", "migrate", "--database-url", databaseURL])
            guard migrate.status == 0 else { throw TestSupportError("migrate failed: \(migrate.stderr)") }
            var sql = framework.ddl
            for (i, person) in people.enumerated() {
                sql += framework.addApple(i, person.oldSub, person.email) + ";\n"
                // Another provider's users whose subjects equal an Apple user's old and new identifiers.
                sql += framework.addOther(2 * i, person.oldSub, "other-\(2 * i)@example.org") + ";\n"
                sql += framework.addOther(2 * i + 1, person.newSub, "other-\(2 * i + 1)@example.org") + ";\n"
            }
            _ = try TestDatabase.psql(databaseURL, sql)
            let world = SchemaWorld(framework: framework, emulator: emulator, directory: directory, sender: sender, recipient: recipient,
                                    databaseURL: databaseURL, acceptedAt: acceptedAt, people: people, stranger: users[count].id)
            try await body(world)
        } catch {
            await emulator.stop()
            directory.remove()
            throw error
        }
        await emulator.stop()
        directory.remove()
    }

    /// Writes the configuration (the framework's `legacy` section, `edit` applied) and returns its path; without
    /// `recipientKey` the recipient is named by its team ID alone, as on the sender's machine.
    func configuration(port: Int = 0, recipientKey: Bool = true, _ edit: (inout [String: Any]) -> Void = { _ in }) throws -> String {
        var legacy = framework.legacy
        edit(&legacy)
        let tree: [String: Any] = [
            "listen": "127.0.0.1:\(port)",
            "database": ["url": databaseURL, "pool_size": 4],
            "apple": [
                "base_url": emulator.baseURL.absoluteString, "client_ids": [SchemaWorld.clientID],
                "transfer": [
                    "client_id": SchemaWorld.clientID, "accepted_at": ISO8601DateFormatter().string(from: acceptedAt),
                    "sender": ["team_id": sender.teamID, "key_id": sender.keyID, "private_key_path": "sender.p8"],
                    "recipient": recipientKey ? ["team_id": recipient.teamID, "key_id": recipient.keyID, "private_key_path": "recipient.p8"]
                        : ["team_id": recipient.teamID],
                ],
            ],
            "legacy": legacy,
        ]
        try directory.write("baton.json", String(decoding: try JSONSerialization.data(withJSONObject: tree), as: UTF8.self))
        return directory.path("baton.json")
    }

    func psql(_ sql: String) throws -> String { try TestDatabase.psql(databaseURL, sql) }

    /// Adds the unique index over the `where` columns and the subject that the start-up check asks for, when the
    /// framework creates none (better-auth): every command touching the table checks it first.
    func addMissingSubjectIndex() throws {
        guard !framework.hasSubjectIndex else { return }
        let table = (framework.legacy["table"] as! String).split(separator: ".").map { "\"\($0)\"" }.joined(separator: ".")
        let columns = ((framework.legacy["where"] as? [String: Any])?.keys.sorted() ?? []) + [framework.legacy["subject_column"] as! String]
        _ = try psql("CREATE UNIQUE INDEX ON \(table) (\(columns.map { "\"\($0)\"" }.joined(separator: ", ")))")
    }
    func count(_ sql: String) throws -> Int { Int(try psql(sql)) ?? -1 }

    /// A fresh identity token of the user `id` under the current team.
    func token(_ id: String) throws -> String {
        try emulator.authorize(clientID: SchemaWorld.clientID, user: id).idToken
    }

    /// The claims of `token`.
    func claims(_ token: String) throws -> JSONObject {
        try CompactJWS.parse(token).claims()
    }

    /// Writes the configuration as it is before the transfer's acceptance (no `apple.transfer.accepted_at`) and
    /// returns its path, with the text of the accepted configuration to write over it once the test accepts.
    func configurationBeforeAcceptance(port: Int = 0, recipientKey: Bool = true) throws -> (path: String, accepted: String) {
        let path = try configuration(port: port, recipientKey: recipientKey)
        let accepted = try String(contentsOfFile: path, encoding: .utf8)
        var tree = try JSONSerialization.jsonObject(with: Data(accepted.utf8)) as! [String: Any]
        var apple = tree["apple"] as! [String: Any]
        var transfer = apple["transfer"] as! [String: Any]
        transfer.removeValue(forKey: "accepted_at")
        apple["transfer"] = transfer
        tree["apple"] = apple
        try String(decoding: try JSONSerialization.data(withJSONObject: tree), as: UTF8.self).write(toFile: path, atomically: true, encoding: .utf8)
        return (path, accepted)
    }

    /// Starts `baton serve` with `config` on `port`; returns once `/healthz` answers 200 (or throws after 10 s).
    func startServing(config: String, port: Int) async throws -> RunningProcess {
        let process = try runProcessAsync(batonBinaryPath, ["serve", "--config", config])
        for _ in 0..<200 {
            if await SchemaHTTP.status("GET", port: port, path: "/healthz") == 200 { return process }
            try await Task.sleep(for: .milliseconds(50))
        }
        process.signal(SIGTERM)
        let result = try? await offPool { try process.wait(timeout: 30) }
        throw TestSupportError("baton serve did not come up: \(result?.stderr ?? "")")
    }

    /// Starts `baton serve`, runs `body` with its port, then stops it with SIGTERM and returns its output.
    @discardableResult
    func serving(_ body: (Int) async throws -> Void) async throws -> ProcessResult {
        let port = try freeLoopbackPort()
        let process = try await startServing(config: try configuration(port: port), port: port)
        do {
            try await body(port)
        } catch {
            process.signal(SIGTERM)
            let result = try? await offPool { try process.wait(timeout: 30) }
            throw TestSupportError("\(error); serve stderr: \(result?.stderr ?? "")")
        }
        process.signal(SIGTERM)
        return try await offPool { try process.wait(timeout: 30) }
    }

    /// `GET /v1/credential-state?user=…`'s `state`.
    func credentialState(port: Int, user: String) async throws -> String? {
        var components = URLComponents(string: "http://127.0.0.1:\(port)/v1/credential-state")!
        components.queryItems = [URLQueryItem(name: "user", value: user)]
        let (data, _) = try await SchemaHTTP.session.data(from: components.url!)
        return (try JSONSerialization.jsonObject(with: data) as? [String: Any])?["state"] as? String
    }
}

/// The scenario every framework runs through the built binary: import, doctor, sign-ins (first, concurrent,
/// with an email another row holds, after the application changed the email, unmatched, current), credential
/// state, exchange, report; other providers' rows, other columns and other JSON keys unchanged throughout.
enum SchemaScenario {
    static func run(_ framework: Framework) async throws {
        try await SchemaWorld.run(framework, apple: 6) { world in
            let before = try world.psql(framework.invariant)
            let people = world.people

            // doctor explains the table in one line per check; a missing unique index comes with the SQL that adds it.
            var doctor = try await runBatonOffPool(["doctor", "--config", try world.configuration()])
            let missingIndex = doctor.stdout.split(separator: "\n").first { $0.hasPrefix("FAIL  subject uniqueness") }
            #expect((missingIndex == nil) == framework.hasSubjectIndex, "\(doctor.stdout)")
            if let line = missingIndex, let fix = line.range(of: "; fix: ") {
                let refused = try await runBatonOffPool(["serve", "--config", try world.configuration()])
                #expect(refused.status == 1 && refused.stderr.contains("has no unique constraint"), "\(refused.stderr)")
                // Every command that touches the application's table runs serve's checks: the sender's walk too.
                let walk = try await runBatonOffPool(["transfer-ids", "--yes", "--rate", "100", "--config", try world.configuration()])
                #expect(walk.status == 1 && walk.stderr.contains("has no unique constraint"), "\(walk.stderr)")
                #expect(try world.count("SELECT count(*) FROM baton.transfers") == 0)
                _ = try world.psql(String(line[fix.upperBound...]))
                doctor = try await runBatonOffPool(["doctor", "--config", try world.configuration()])
            }
            // The sender's walk (baton transfer-ids) takes the Apple rows only; the same pairs imported
            // (old_sub,transfer_sub) are then already present.
            let ids = try await runBatonOffPool(["transfer-ids", "--yes", "--rate", "100", "--config", try world.configuration()])
            #expect(ids.status == 0, "\(ids.stdout)\(ids.stderr)")
            #expect(try world.count("SELECT count(*) FROM baton.transfers") == people.count)
            #expect(try world.count("SELECT count(*) FROM baton.transfers WHERE transfer_sub IS NOT NULL") == people.count)
            let csv = world.directory.path("transfers.csv")
            try (["old_sub,transfer_sub"] + people.map { "\($0.oldSub),\($0.transferSub)" }).joined(separator: "\n")
                .write(toFile: csv, atomically: true, encoding: .utf8)
            let imported = try await runBatonOffPool(["import", "transfers", csv, "--config", try world.configuration()])
            #expect(imported.status == 0, "\(imported.stderr)")
            #expect(imported.stdout.contains("already present \(people.count)"), "\(imported.stdout)")

            #expect(doctor.stdout.contains("ok    apple rows: legacy.where selects 6 rows"), "\(doctor.stdout)")
            #expect(doctor.stdout.contains("ok    subject uniqueness: unique index"), "\(doctor.stdout)")
            #expect(doctor.stdout.contains("ok    key uniqueness: unique index"), "\(doctor.stdout)")
            #expect(doctor.stdout.contains("ok    email: emails are in"), "\(doctor.stdout)")
            #expect(doctor.stdout.contains("ok    json copy:") == (framework.legacy["json"] != nil), "\(doctor.stdout)")
            #expect(doctor.stdout.contains("ok    email copy:") == (framework.legacy["email_copies"] != nil), "\(doctor.stdout)")
            // The copy of user `i`'s email, when the framework keeps one: it follows the email, or both keep the old one.
            func expectCopy(_ i: Int, _ email: String) throws {
                if let copy = framework.emailCopy { #expect(try world.psql(copy(i)) == email, "user \(i)'s email copy") }
            }

            // The application changed user 3's email to a real address; another user holds user 2's new relay address.
            let newEmail2 = try world.claims(try world.token(people[2].id))["email"]!.stringValue!
            _ = try world.psql(framework.setEmail(3, "person3@example.com"))
            _ = try world.psql(framework.addOther(100, "unrelated-100", newEmail2))
            let guarded = try world.psql(framework.invariant)

            let output = try await world.serving { port in
                // A first sign-in migrates: subject, relay email, JSON keys.
                let first = await SchemaHTTP.signIn(port: port, token: try world.token(people[0].id))
                #expect(first.status == 200 && first.outcome == "migrated", "\(first)")
                let row0 = try world.psql(framework.appleRow(0)).split(separator: "|", omittingEmptySubsequences: false).map(String.init)
                let newEmail0 = try world.claims(try world.token(people[0].id))["email"]!.stringValue!
                #expect(row0[0] == people[0].newSub)
                #expect(row0[1] == newEmail0)
                try expectCopy(0, newEmail0)
                let json0 = try JSON.parseObject(Array(row0[2].utf8))
                for key in framework.jsonSubjectKeys { #expect(json0[key]?.stringValue == people[0].newSub, "\(key) in \(row0[2])") }
                // With an identity table, the answer names the account too: the users row holding the person's email.
                if let mail = framework.legacy["email"] as? [String: Any] {
                    let accountKey = try #require(first.accountKey, "\(first)")
                    let usersTable = (mail["table"] as! String).split(separator: ".").map { "\"\($0)\"" }.joined(separator: ".")
                    #expect(try world.psql("SELECT \"\(mail["column"] as! String)\" FROM \(usersTable) WHERE \"\(mail["key_column"] as! String)\"::text = '\(accountKey)'")
                            == newEmail0)
                } else {
                    #expect(first.accountKey == nil && first.key != nil, "\(first)")
                }

                // Concurrent first sign-ins of one user: one migrates, the others see the current record.
                let token1 = try world.token(people[1].id)
                let answers = await withTaskGroup(of: SchemaHTTP.Answer.self) { group in
                    for _ in 0..<5 { group.addTask { await SchemaHTTP.signIn(port: port, token: token1) } }
                    return await group.reduce(into: []) { $0.append($1) }
                }
                #expect(answers.allSatisfy { $0.status == 200 }, "\(answers)")
                #expect(answers.filter { $0.outcome == "migrated" }.count == 1, "\(answers)")
                #expect(answers.filter { $0.outcome == "current" }.count == 4, "\(answers)")
                #expect(try world.count("SELECT count(*) FROM baton.events WHERE kind = 'migrated' AND old_sub = '\(people[1].oldSub)'") == 1)

                // Another row holds the new email under a unique constraint: migrated, email kept, conflict recorded.
                let third = await SchemaHTTP.signIn(port: port, token: try world.token(people[2].id))
                #expect(third.status == 200 && third.outcome == "migrated", "\(third)")
                let row2 = try world.psql(framework.appleRow(2)).split(separator: "|", omittingEmptySubsequences: false).map(String.init)
                #expect(row2[0] == people[2].newSub)
                #expect(row2[1] == people[2].email)
                try expectCopy(2, people[2].email)
                #expect(try world.count("SELECT count(*) FROM baton.events WHERE kind = 'email_conflict' AND new_email = '\(newEmail2)' AND old_email = '\(people[2].email)'") == 1)
                let again = await SchemaHTTP.signIn(port: port, token: try world.token(people[2].id))
                #expect(again.status == 200 && again.outcome == "current", "\(again)")

                // An address the user gave the application is kept (email_policy relay).
                let fourth = await SchemaHTTP.signIn(port: port, token: try world.token(people[3].id))
                #expect(fourth.status == 200 && fourth.outcome == "migrated", "\(fourth)")
                let row3 = try world.psql(framework.appleRow(3)).split(separator: "|", omittingEmptySubsequences: false).map(String.init)
                #expect(row3[1] == "person3@example.com")
                try expectCopy(3, people[3].email)  // not the stored address: left as it is (a rehearsal reports it)
                let current = await SchemaHTTP.signIn(port: port, token: try world.token(people[3].id))
                #expect(current.outcome == "current")
                #expect(try world.psql(framework.appleRow(3)).split(separator: "|", omittingEmptySubsequences: false)[1] == "person3@example.com")

                // A transfer_sub Baton cannot resolve: unmatched, never new.
                let stranger = await SchemaHTTP.signIn(port: port, token: try world.token(world.stranger))
                #expect(stranger.status == 200 && stranger.outcome == "unmatched", "\(stranger)")
                // Replayed, the same token answers the same and records nothing more.
                for _ in 0..<3 {
                    #expect(await SchemaHTTP.signIn(port: port, token: try world.token(world.stranger)).outcome == "unmatched")
                }
                #expect(try world.count("SELECT count(*) FROM baton.events WHERE kind = 'unmatched'") == 1)

                // Credential state through the filter: an Apple row's new subject; another provider's subject is unknown.
                #expect(try await world.credentialState(port: port, user: people[0].newSub) == "authorized")
                #expect(try await world.credentialState(port: port, user: "unrelated-100") == "not_found")
            }
            #expect(!output.stderr.contains("@privaterelay"), "emails masked in logs")
            #expect(!output.stderr.contains("status=500"), "\(output.stderr.split(separator: "\n").filter { $0.contains("error") })")

            // The rest through the bulk exchange.
            let exchange = try await runBatonOffPool(["exchange", "--config", try world.configuration()])
            #expect(exchange.status == 0, "\(exchange.stdout)\(exchange.stderr)")
            for i in 4..<6 {
                let row = try world.psql(framework.appleRow(i)).split(separator: "|", omittingEmptySubsequences: false).map(String.init)
                #expect(row[0] == people[i].newSub, "user \(i) after exchange: \(row)")
                try expectCopy(i, row[1])
            }
            #expect(try world.count("SELECT count(*) FROM baton.transfers WHERE state = 'migrated'") == 6)
            #expect(try world.count("SELECT count(*) FROM baton.events WHERE kind = 'migrated'") == 6)

            // The report counts the migrations and the unmatched sign-in.
            let report = try await runBatonOffPool(["report", "--format", "json", "--config", try world.configuration()])
            #expect(report.status == 0, "\(report.stderr)")
            let json = try JSON.parseObject(Array(report.stdout.utf8))
            #expect(json["totals"]?["migrated"]?.intValue == 6, "\(report.stdout.prefix(400))")
            #expect(json["totals"]?["unmatched_signins"]?.intValue == 1, "\(report.stdout.prefix(400))")
            let table = try await runBatonOffPool(["report", "--config", try world.configuration()])
            #expect(table.stdout.contains("Unmatched   1 sign-ins carried a transfer_sub"), "\(table.stdout.prefix(800))")

            // Nothing else changed: other providers' rows, other columns, other JSON keys.
            #expect(try world.psql(framework.invariant) == guarded)
            #expect(before != guarded, "the invariant digest sees the application's own edits")
        }
    }
}

/// Plain HTTP to `baton serve` on loopback for the framework scenarios.
enum SchemaHTTP {
    /// An answer: the status (-1 when none came) and the body's `error` and `outcome`.
    struct Answer: Sendable {
        var status: Int
        var error: String?
        var outcome: String?
        /// `user.key` and `user.account_key`.
        var key: String? = nil
        var accountKey: String? = nil
    }

    static let session: URLSession = {
        let configuration = URLSessionConfiguration.ephemeral
        configuration.timeoutIntervalForRequest = 20
        return URLSession(configuration: configuration)
    }()

    /// `POST /v1/signin` with `token`.
    static func signIn(port: Int, token: String) async -> Answer {
        var request = URLRequest(url: URL(string: "http://127.0.0.1:\(port)/v1/signin")!)
        request.httpMethod = "POST"
        request.setValue("application/json", forHTTPHeaderField: "Content-Type")
        request.httpBody = try? JSONSerialization.data(withJSONObject: ["id_token": token])
        do {
            let (data, response) = try await session.data(for: request)
            let body = (try? JSONSerialization.jsonObject(with: data)) as? [String: Any]
            let user = body?["user"] as? [String: Any]
            return Answer(status: (response as? HTTPURLResponse)?.statusCode ?? -1, error: body?["error"] as? String, outcome: body?["outcome"] as? String,
                          key: user?["key"] as? String, accountKey: user?["account_key"] as? String)
        } catch {
            return Answer(status: -1, error: "transport: \(type(of: error))")
        }
    }

    /// The status of `GET path` (-1 when no answer came).
    static func status(_ method: String, port: Int, path: String) async -> Int {
        var request = URLRequest(url: URL(string: "http://127.0.0.1:\(port)\(path)")!)
        request.httpMethod = method
        return ((try? await session.data(for: request))?.1 as? HTTPURLResponse)?.statusCode ?? -1
    }

}
