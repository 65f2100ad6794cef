import BatonEmulator
import BatonJOSE
import BatonJSON
import Foundation
import Testing
import TestSupport

@Suite("POST /emulator/users with given user identifiers")
struct GivenUsersTests {
    /// Two subjects as a team's own table holds them: one Apple-shaped, one not (any stored subject is taken).
    static let given = ["001234.0123456789abcdef0123456789abcdef.0001", "legacy-subject-2"]

    @Test("the given identifiers go through the sender's transfer identifier and the recipient's exchange over HTTP")
    func roundTrip() async throws {
        try await withEmulator { emulator in
            let http = EmulatorHTTP(emulator)
            let sender = try emulator.createTeam("AAAAAAAAAA")
            let recipient = try emulator.createTeam("BBBBBBBBBB")
            try emulator.createApp(clientID: "com.example.app", teamID: sender.teamID)
            let created = try await http.postJSON("/emulator/users", ["client_id": "com.example.app", "user_identifiers": .array(Self.given.map(JSONValue.string))])
            #expect(created.status == 201, "\(created.text)")
            let users = try #require(created.json["users"]?.arrayValue)
            #expect(users.compactMap { $0["user_identifier"]?.stringValue } == Self.given)
            #expect(users.allSatisfy { $0["id"]?.stringValue?.hasPrefix("person-") == true && $0["email"]?.stringValue != nil })

            try emulator.initiateTransfer(clientID: "com.example.app", toTeamID: recipient.teamID)
            let senderSecret = try clientSecret(team: sender, clientID: "com.example.app", now: emulator.now)
            let senderToken = try await http.accessToken(clientID: "com.example.app", secret: senderSecret)
            var transferSubs: [String] = []
            for sub in Self.given {
                let reply = try await http.postForm("/auth/usermigrationinfo", [("sub", sub), ("target", recipient.teamID), ("client_id", "com.example.app"),
                                                                               ("client_secret", senderSecret)], bearer: senderToken)
                #expect(reply.status == 200, "\(sub): \(reply.text)")
                transferSubs.append(try #require(reply.json["transfer_sub"]?.stringValue))
            }
            #expect(Set(transferSubs).count == 2 && Set(transferSubs).isDisjoint(with: Self.given))
            let listed = try await http.get("/emulator/transfer-identifiers?client_id=com.example.app")
            var expected = JSONObject()
            for (sub, transferSub) in zip(Self.given, transferSubs) { expected[sub] = .string(transferSub) }
            #expect(listed.json["transfer_subs"] == .object(expected))

            #expect(try await http.postJSON("/emulator/transfers/accept", ["client_id": "com.example.app"]).status == 200)
            let recipientSecret = try clientSecret(team: recipient, clientID: "com.example.app", now: emulator.now)
            let recipientToken = try await http.accessToken(clientID: "com.example.app", secret: recipientSecret)
            for (index, transferSub) in transferSubs.enumerated() {
                let reply = try await http.postForm("/auth/usermigrationinfo", [("transfer_sub", transferSub), ("client_id", "com.example.app"),
                                                                               ("client_secret", recipientSecret)], bearer: recipientToken)
                #expect(reply.status == 200, "\(reply.text)")
                let newSub = try #require(reply.json["sub"]?.stringValue)
                #expect(!Self.given.contains(newSub))
                // The person behind the given identifier signs in under team B: the new sub and that transfer_sub.
                let authorized = try await http.postJSON("/emulator/authorize", ["client_id": "com.example.app", "user": .string(Self.given[index])])
                let claims = try CompactJWS.parse(try #require(authorized.json["id_token"]?.stringValue)).claims()
                #expect(claims["sub"]?.stringValue == newSub)
                #expect(claims["transfer_sub"]?.stringValue == transferSub)
            }
        }
    }

    @Test("a malformed, repeated or taken identifier is refused with 400 and a reason naming it", arguments: [
        (#"{"client_id": "com.example.app", "user_identifiers": ["001234.a.0001", ""]}"#, "user_identifiers[1] is empty"),
        (#"{"client_id": "com.example.app", "user_identifiers": ["\#(String(repeating: "a", count: 256))"]}"#,
         "user_identifiers[0] is longer than 255 characters"),
        (#"{"client_id": "com.example.app", "user_identifiers": ["001234.a.0001", 7]}"#, "user_identifiers[1] must be a string"),
        (#"{"client_id": "com.example.app", "user_identifiers": ["001234.a.0001", "001234.b.0002", "001234.a.0001"]}"#,
         "user_identifiers[2] \"001234.a.0001\" repeats user_identifiers[0]"),
        (#"{"client_id": "com.example.app", "user_identifiers": ["001234.b.0002", "001234.taken.0001"]}"#,
         "user_identifiers[1] \"001234.taken.0001\" is already a user identifier"),
        (#"{"client_id": "com.example.app", "user_identifiers": []}"#, "user_identifiers must hold 1 to 1000000 identifiers"),
        (#"{"client_id": "com.example.app", "user_identifiers": "001234.a.0001"}"#, "user_identifiers must be an array of strings"),
        (#"{"client_id": "com.example.app", "count": 1, "user_identifiers": ["001234.a.0001"]}"#, "give count or user_identifiers, not both"),
        (#"{"client_id": "com.example.app"}"#, "give count or user_identifiers"),
    ])
    func refused(body: String, reason: String) async throws {
        try await withEmulator { emulator in
            let http = EmulatorHTTP(emulator)
            try emulator.createTeam("AAAAAAAAAA")
            try emulator.createApp(clientID: "com.example.app", teamID: "AAAAAAAAAA")
            _ = try emulator.createUsers(clientID: "com.example.app", userIdentifiers: ["001234.taken.0001"])
            let reply = try await http.send("POST", "/emulator/users", body: Data(body.utf8), contentType: "application/json")
            #expect(reply.status == 400)
            #expect(reply.error == "bad_input")
            #expect(reply.json["reason"]?.stringValue == reason)
            // Nothing of the refused request was created: its valid identifiers are still free.
            let valid = try await http.postJSON("/emulator/users", ["client_id": "com.example.app", "user_identifiers": ["001234.a.0001", "001234.b.0002"]])
            #expect(valid.status == 201, "\(valid.text)")
        }
    }

    @Test("a table's worth of identifiers fits one request (not the HTTP server's 64 KiB), and their transfer identifiers list in seconds")
    func large() async throws {
        try await withEmulator { emulator in
            let http = EmulatorHTTP(emulator)
            try emulator.createTeam("AAAAAAAAAA")
            try emulator.createTeam("BBBBBBBBBB")
            try emulator.createApp(clientID: "com.example.app", teamID: "AAAAAAAAAA")
            let identifiers = (0..<20_000).map { String(format: "%06d.%032x.%04d", $0, $0, $0 % 10_000) }
            let reply = try await http.postJSON("/emulator/users", ["client_id": "com.example.app", "user_identifiers": .array(identifiers.map(JSONValue.string))])
            #expect(reply.status == 201, "\(reply.text.prefix(200))")
            #expect(reply.json["users"]?.arrayValue?.last?["user_identifier"]?.stringValue == identifiers.last)
            try emulator.initiateTransfer(clientID: "com.example.app", toTeamID: "BBBBBBBBBB")
            // Built member by member, the answer took about 50 s here (a linear search per member); now about 1 s.
            let started = ContinuousClock.now
            let listed = try await http.get("/emulator/transfer-identifiers?client_id=com.example.app")
            #expect(ContinuousClock.now - started < .seconds(15))
            let transferSubs = try #require(listed.json["transfer_subs"]?.objectValue)
            #expect(transferSubs.keys == identifiers)
        }
    }
}
