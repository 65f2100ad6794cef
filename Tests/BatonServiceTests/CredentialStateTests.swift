import BatonAppleSignIn
import Baton
import BatonService
import Foundation
import FoundationNetworking
import BatonJOSE
import BatonJSON
import BatonPostgres
import TestSupport
import Testing

/// `GET /v1/credential-state` over HTTP on loopback, row by row of the rules (docs/runbook.md, "Credential
/// state"), with and without `legacy.transfer_column`, before and after `apple.transfer.accepted_at`.
@Suite("Credential state as getCredentialState answers it")
struct CredentialStateTests {
    /// One identifier of the data set, and what it is.
    struct Case: Sendable {
        var user: String
        var label: String
        /// The expected state, given whether the transfer column is configured and the transfer accepted.
        var expected: @Sendable (_ transferColumn: Bool, _ accepted: Bool) -> CredentialState
    }

    static let cases: [Case] = [
        Case(user: "recv.migrated", label: "receiving team: a migrated record's new identifier (its row keeps the transfer identifier)") { _, _ in .authorized },
        Case(user: "recv.signup", label: "receiving team: a user who signed up after the transfer") { _, _ in .authorized },
        Case(user: "send.migrated", label: "sending team: a migrated user's old identifier") { _, accepted in accepted ? .transferred : .authorized },
        Case(user: "send.pending", label: "sending team: a pending row of baton.transfers") { _, accepted in accepted ? .transferred : .authorized },
        Case(user: "send.column", label: "sending team: a record whose transfer column holds its transfer identifier") { column, accepted in
            column && accepted ? .transferred : .authorized
        },
        Case(user: "send.revoked", label: "sending team, consent revoked") { _, _ in .revoked },
        Case(user: "recv.deleted", label: "receiving team, account deleted") { _, _ in .revoked },
        Case(user: "nobody", label: "unknown") { _, _ in .notFound },
        Case(user: "t.crosscompany", label: "a transfer identifier is not a user identifier") { _, _ in .notFound },
        Case(user: "send.crosscompany", label: "a sender's identifier the recipient's table never held (NULL subject, transfer identifier only)") { _, _ in .notFound },
    ]

    @Test("every rule, with and without a transfer column, before and after acceptance")
    func everyRule() async throws {
        let url = try TestDatabase.create("credential_state")
        let pool = PostgresPool(url: url, maxConnections: 4, acquireTimeout: .seconds(30))
        _ = try await BatonSchema.migrator().migrate(pool)
        try await pool.withConnection { connection in
            try await connection.executeScript(unsafeSQL: """
                CREATE TABLE public.users (id bigserial PRIMARY KEY, apple_sub text UNIQUE, email text, transfer_sub text);
                INSERT INTO public.users (apple_sub, transfer_sub) VALUES
                    ('send.migrated', 't.migrated'), ('send.pending', NULL), ('send.column', 't.column'),
                    ('recv.signup', NULL), ('send.revoked', NULL), ('recv.deleted', NULL),
                    (NULL, 't.crosscompany');
                INSERT INTO baton.transfers (old_sub, transfer_sub) VALUES ('send.pending', 't.pending'), ('send.revoked', 't.revoked');
                """)
        }
        let withColumn = LegacyStore(pool: pool, legacy: try BatonConfiguration.Legacy(
            table: "public.users", keyColumn: "id", subjectColumn: "apple_sub", emailColumn: "email", transferColumn: "transfer_sub").identifiers())
        let withoutColumn = LegacyStore(pool: pool, legacy: try BatonConfiguration.Legacy(
            table: "public.users", keyColumn: "id", subjectColumn: "apple_sub", emailColumn: "email", transferColumn: nil).identifiers())
        let outcome = try await withColumn.applyMigration(oldSub: "send.migrated", newSub: "recv.migrated", newEmail: nil, isPrivateEmail: nil,
                                                          transferSub: "t.migrated", method: .exchange)
        guard case .migrated = outcome else { throw TestSupportError("migration did not happen: \(outcome)") }
        #expect(try await withColumn.applyNotification(.consentRevoked, subject: "send.revoked", eventTime: Date()))
        #expect(try await withColumn.applyNotification(.accountDelete, subject: "recv.deleted", eventTime: Date()))

        let now = Date()
        let acceptances: [(String, Date?, Bool)] = [
            ("not accepted", nil, false), ("accepted tomorrow", now.addingTimeInterval(86_400), false), ("accepted yesterday", now.addingTimeInterval(-86_400), true),
        ]
        for (store, column) in [(withColumn, true), (withoutColumn, false)] {
            for (name, acceptedAt, accepted) in acceptances {
                let engine = BatonEngine(store: store, keys: FixedKeySet(JWKSet(keys: [])), clientIDs: ["com.example.app"], transferAcceptedAt: acceptedAt)
                let server = try await BatonServer.start(engine: engine)
                for item in CredentialStateTests.cases {
                    let state = try await CredentialStateTests.state(of: item.user, port: server.port)
                    #expect(state == item.expected(column, accepted).rawValue,
                            "\(item.label), \(column ? "with" : "without") a transfer column, \(name)")
                }
                await server.stop()
            }
        }
        await pool.close()
    }

    @Test("baton serve (the built binary) reads apple.transfer.accepted_at: a sending-team identifier is authorized before, transferred after")
    func servedBinary() async throws {
        let url = try TestDatabase.create("credential_state_serve")
        _ = try runBaton(["db", "migrate", "--database-url", url])
        _ = try TestDatabase.psql(url, """
            CREATE TABLE public.users (id bigserial PRIMARY KEY, apple_sub text UNIQUE, email text);
            INSERT INTO public.users (apple_sub) VALUES ('send.pending'), ('recv.signup');
            INSERT INTO baton.transfers (old_sub, transfer_sub) VALUES ('send.pending', 't.pending');
            """)
        let yesterday = ISO8601DateFormatter().string(from: Date().addingTimeInterval(-86_400))
        for (acceptedAt, expected) in [(nil, "authorized"), (yesterday, "transferred")] as [(String?, String)] {
            let port = try freeLoopbackPort()
            var apple: JSONObject = ["base_url": "http://127.0.0.1:9", "client_ids": ["com.example.app"]]
            if let acceptedAt { apple["transfer"] = ["client_id": "com.example.app", "accepted_at": .string(acceptedAt)] }
            let config: JSONValue = [
                "listen": .string("127.0.0.1:\(port)"), "database": ["url": .string(url), "pool_size": 2], "apple": .object(apple),
                "legacy": ["table": "public.users", "key_column": "id", "subject_column": "apple_sub", "email_column": "email"],
            ]
            let path = FileManager.default.temporaryDirectory.appendingPathComponent("baton-state-\(UUID().uuidString).json").path
            try JSON.serialize(config).write(toFile: path, atomically: true, encoding: .utf8)
            defer { try? FileManager.default.removeItem(atPath: path) }
            let child = try runProcessAsync(batonBinaryPath, ["serve", "--config", path])
            var states: [String?] = []
            for _ in 0..<200 {
                if let state = try? await CredentialStateTests.state(of: "send.pending", port: port) {
                    states = [state, try await CredentialStateTests.state(of: "recv.signup", port: port),
                              try await CredentialStateTests.state(of: "nobody", port: port)]
                    break
                }
                try await Task.sleep(for: .milliseconds(50))
            }
            child.signal(SIGTERM)
            let result = try await offPool { try child.wait(timeout: 30) }
            #expect(states == [expected, "authorized", "not_found"], "accepted_at \(acceptedAt ?? "absent"): \(result.stderr)")
        }
    }

    /// `GET /v1/credential-state?user=…` on the live server; the `state` member.
    static func state(of user: String, port: Int) async throws -> String? {
        var components = URLComponents(string: "http://127.0.0.1:\(port)/v1/credential-state")!
        components.queryItems = [URLQueryItem(name: "user", value: user)]
        let (data, response) = try await URLSession.shared.data(from: components.url!)
        guard (response as? HTTPURLResponse)?.statusCode == 200 else { return "HTTP \((response as? HTTPURLResponse)?.statusCode ?? 0)" }
        return try JSON.parse(Array(data))["state"]?.stringValue
    }
}
