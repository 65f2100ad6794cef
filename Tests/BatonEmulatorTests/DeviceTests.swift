import BatonEmulator
import Foundation
import BatonJOSE
import Testing

@Suite("Simulated devices: /emulator/authorize and /emulator/credential-state")
struct DeviceTests {
    @Test("authorize by person ID or any identifier of the person; token claims as Apple's")
    func authorize() async throws {
        try await Scenario.run(users: 2) { scenario in
            let user = scenario.users[0]
            let before = scenario.emulator.now.timeIntervalSince1970.rounded(.down)
            let reply = try await scenario.http.postJSON("/emulator/authorize", ["client_id": .string(scenario.clientID), "user": .string(user.id), "nonce": "nonce-123"])
            let after = scenario.emulator.now.timeIntervalSince1970
            #expect(reply.status == 200)
            let token = try #require(reply.json["id_token"]?.stringValue)
            #expect(reply.json["user_identifier"]?.stringValue == user.userIdentifier)
            #expect(reply.json["code"]?.stringValue?.isEmpty == false)
            let jws = try CompactJWS.parse(token)
            #expect(jws.header.alg == "RS256")
            #expect(jws.header.kid?.count == 10)
            let claims = try await scenario.verifiedClaims(token)
            #expect(claims["iss"]?.stringValue == "https://appleid.apple.com")
            #expect(claims["aud"]?.stringValue == scenario.clientID)
            #expect(claims["sub"]?.stringValue == user.userIdentifier)
            #expect(claims["nonce"]?.stringValue == "nonce-123")
            #expect(claims["email"]?.stringValue == user.email)
            #expect(claims["is_private_email"] == .bool(true))
            #expect(claims["transfer_sub"] == nil)
            let iat = try #require(claims["iat"]?.intValue), exp = try #require(claims["exp"]?.intValue)
            #expect(exp > iat)
            #expect(Double(iat) >= before && Double(iat) <= after)

            let byIdentifier = try await scenario.http.postJSON("/emulator/authorize", ["client_id": .string(scenario.clientID), "user": .string(user.userIdentifier)])
            #expect(byIdentifier.json["user_identifier"]?.stringValue == user.userIdentifier)
            let noNonce = try await scenario.verifiedClaims(try #require(byIdentifier.json["id_token"]?.stringValue))
            #expect(noNonce["nonce"] == nil)
            // A user who shares their real address: no is_private_email claim.
            let second = try await scenario.verifiedClaims(try scenario.emulator.authorize(clientID: scenario.clientID, user: scenario.users[1].id).idToken)
            #expect(second["email"]?.stringValue == scenario.users[1].email)
            #expect(second["is_private_email"] == nil)
        }
    }

    @Test("after the transfer, the old identifier re-authorizes silently to the new one")
    func silentReauthorization() async throws {
        try await Scenario.run(users: 1) { scenario in
            let old = scenario.users[0].userIdentifier
            let transferSubs = try await scenario.transferAll()
            #expect(scenario.emulator.credentialState(clientID: scenario.clientID, userIdentifier: old) == .transferred)
            let authorization = try scenario.emulator.authorize(clientID: scenario.clientID, user: old)
            #expect(authorization.userIdentifier != old)
            let claims = try await scenario.verifiedClaims(authorization.idToken)
            #expect(claims["transfer_sub"]?.stringValue == transferSubs[old])
            let state = try await scenario.http.get("/emulator/credential-state?client_id=\(scenario.clientID)&user_identifier=\(authorization.userIdentifier)")
            #expect(state.json["state"] == "authorized")
        }
    }

    @Test("authorize errors: unknown app, unknown user, missing members")
    func authorizeErrors() async throws {
        try await Scenario.run(users: 1) { scenario in
            let app = try await scenario.http.postJSON("/emulator/authorize", ["client_id": "com.nope", "user": .string(scenario.users[0].id)])
            #expect(app.status == 404 && app.error == "unknown_app")
            let user = try await scenario.http.postJSON("/emulator/authorize", ["client_id": .string(scenario.clientID), "user": "person-999999"])
            #expect(user.status == 404 && user.error == "unknown_user")
            let missing = try await scenario.http.postJSON("/emulator/authorize", ["client_id": .string(scenario.clientID)])
            #expect(missing.status == 400 && missing.error == "bad_input")
            let notJSON = try await scenario.http.send("POST", "/emulator/authorize", body: Data("{".utf8), contentType: "application/json")
            #expect(notJSON.status == 400 && notJSON.error == "bad_input")
        }
    }

    @Test("credential state: authorized, transferred, revoked, not_found")
    func credentialStates() async throws {
        try await Scenario.run(users: 3) { scenario in
            func state(_ identifier: String, _ clientID: String? = nil) async throws -> String? {
                try await scenario.http.get("/emulator/credential-state?client_id=\(clientID ?? scenario.clientID)&user_identifier=\(identifier)").json["state"]?.stringValue
            }
            let (a, b) = (scenario.users[0].userIdentifier, scenario.users[1].userIdentifier)
            #expect(try await state(a) == "authorized")
            #expect(try await state("000000.00000000000000000000000000000000.0000") == "not_found")
            #expect(try await state(a, "com.other") == "not_found")
            let revoke = try await scenario.http.postJSON("/emulator/revoke", ["client_id": .string(scenario.clientID), "user_identifier": .string(b)])
            #expect(revoke.status == 200)
            #expect(try await state(b) == "revoked")
            _ = try await scenario.transferAll()
            #expect(try await state(a) == "transferred")
            #expect(try await state(b) == "revoked")
            let unknownRevoke = try await scenario.http.postJSON("/emulator/revoke", ["client_id": .string(scenario.clientID), "user_identifier": "nobody"])
            #expect(unknownRevoke.status == 404)
            let missing = try await scenario.http.get("/emulator/credential-state?client_id=\(scenario.clientID)")
            #expect(missing.status == 400)
        }
    }

    @Test("200 concurrent authorize calls each get a distinct valid token")
    func concurrentAuthorize() async throws {
        try await Scenario.run(users: 50) { scenario in
            let keys = try JWKSet(json: Array(try await scenario.http.get("/auth/keys").text.utf8))
            let replies = try await withThrowingTaskGroup(of: Reply.self) { group in
                for index in 0..<200 {
                    group.addTask {
                        try await scenario.http.postJSON("/emulator/authorize", [
                            "client_id": .string(scenario.clientID), "user": .string(scenario.users[index % 50].id), "nonce": .string("n\(index)"),
                        ])
                    }
                }
                return try await group.reduce(into: [Reply]()) { $0.append($1) }
            }
            #expect(replies.count == 200)
            var nonces = Set<String>()
            for reply in replies {
                #expect(reply.status == 200)
                let jws = try CompactJWS.parse(try #require(reply.json["id_token"]?.stringValue))
                #expect(keys.key(withID: jws.header.kid ?? "")?.verifies(jws) == true)
                if let nonce = try jws.claims()["nonce"]?.stringValue { nonces.insert(nonce) }
            }
            #expect(nonces.count == 200)
        }
    }
}
