import BatonEmulator
import Foundation
import BatonJOSE
import TestSupport
import Testing

@Suite("GET /auth/keys and POST /auth/token")
struct TokenEndpointTests {
    @Test("the key set has at least two RSA-2048 RS256 keys with 10-character kids")
    func keys() async throws {
        try await withEmulator { emulator in
            let reply = try await EmulatorHTTP(emulator).get("/auth/keys")
            #expect(reply.status == 200)
            #expect(reply.headers["content-type"] == "application/json")
            let set = try JWKSet(json: Array(reply.text.utf8))
            #expect(set.keys.count >= 2)
            for key in set.keys {
                #expect(key.kid?.count == 10)
                #expect(key.alg == "RS256" && key.use == "sig")
                guard case .rsa(let rsa) = key.key else { Issue.record("not RSA"); continue }
                #expect(rsa.modulusBits == 2048)
            }
        }
    }

    @Test("client_credentials gives a bearer token for an hour, not cached")
    func clientCredentials() async throws {
        try await Scenario.run { scenario in
            let reply = try await scenario.http.postForm("/auth/token", [
                ("grant_type", "client_credentials"), ("scope", "user.migration"),
                ("client_id", scenario.clientID), ("client_secret", try scenario.secret(scenario.sender)),
            ])
            #expect(reply.status == 200)
            #expect(reply.json["token_type"] == "Bearer")
            #expect(reply.json["expires_in"]?.intValue == 3600)
            #expect((reply.json["access_token"]?.stringValue ?? "").count > 20)
            #expect(reply.headers["cache-control"] == "no-store")
            #expect(reply.headers["pragma"] == "no-cache")
        }
    }

    @Test("request errors", arguments: [
        ([("scope", "user.migration")], "invalid_request"),
        ([("grant_type", "password"), ("scope", "user.migration")], "unsupported_grant_type"),
        ([("grant_type", "client_credentials"), ("scope", "openid")], "invalid_scope"),
        ([("grant_type", "client_credentials")], "invalid_request"),
    ] as [([(String, String)], String)])
    func requestErrors(fields: [(String, String)], expected: String) async throws {
        try await Scenario.run(users: 1) { scenario in
            let reply = try await scenario.http.postForm("/auth/token", fields + [("client_id", scenario.clientID), ("client_secret", try scenario.secret(scenario.sender))])
            #expect(reply.status == 400)
            #expect(reply.error == expected)
            #expect(reply.json.objectValue?.keys == ["error"])
        }
    }

    @Test("a missing client_secret, a JSON body and a malformed form are invalid_request")
    func malformedRequests() async throws {
        try await Scenario.run(users: 1) { scenario in
            let missing = try await scenario.http.postForm("/auth/token", [("grant_type", "client_credentials"), ("scope", "user.migration"), ("client_id", scenario.clientID)])
            #expect(missing.error == "invalid_request")
            let json = try await scenario.http.postJSON("/auth/token", ["grant_type": "client_credentials"])
            #expect(json.error == "invalid_request")
            let twice = try await scenario.http.send("POST", "/auth/token", body: Data("grant_type=a&grant_type=b".utf8), contentType: "application/x-www-form-urlencoded")
            #expect(twice.error == "invalid_request")
        }
    }

    /// Every way a client secret can be wrong; each must be `invalid_client`.
    static let badSecrets: [(String, @Sendable (Scenario, TeamCredentials) throws -> String)] = [
        ("not a JWS", { _, _ in "not.a.jws" }),
        ("garbage", { _, _ in "garbage" }),
        ("RS256 alg", { s, t in try clientSecret(team: t, clientID: s.clientID, now: s.emulator.now, alg: "RS256") }),
        ("none alg", { s, t in try clientSecret(team: t, clientID: s.clientID, now: s.emulator.now, alg: "none") }),
        ("unknown kid", { s, t in try clientSecret(team: t, clientID: s.clientID, now: s.emulator.now, kid: "ZZZZZZZZZZ") }),
        ("another team's key and kid", { s, t in try clientSecret(team: t, clientID: s.clientID, now: s.emulator.now, signingKeyPEM: s.recipient.privateKeyPEM, kid: s.recipient.keyID) }),
        ("signed by a stranger key", { s, t in try clientSecret(team: t, clientID: s.clientID, now: s.emulator.now, signingKeyPEM: try P256PrivateKey.generate().pkcs8PEM()) }),
        ("DER signature", { s, t in try clientSecret(team: t, clientID: s.clientID, now: s.emulator.now, signature: { input in
            let raw = try P256PrivateKey(pkcs8PEM: t.privateKeyPEM).signES256(input)
            return derSignature(raw)
        }) }),
        ("truncated signature", { s, t in try clientSecret(team: t, clientID: s.clientID, now: s.emulator.now, signature: { input in
            Array(try P256PrivateKey(pkcs8PEM: t.privateKeyPEM).signES256(input).prefix(63))
        }) }),
        ("wrong iss", { s, t in try clientSecret(team: t, clientID: s.clientID, now: s.emulator.now, edit: { $0.iss = "BBBBBBBBBB" }) }),
        ("missing iss", { s, t in try clientSecret(team: t, clientID: s.clientID, now: s.emulator.now, edit: { $0.iss = nil }) }),
        ("wrong sub", { s, t in try clientSecret(team: t, clientID: s.clientID, now: s.emulator.now, edit: { $0.sub = "com.example.other" }) }),
        ("wrong aud", { s, t in try clientSecret(team: t, clientID: s.clientID, now: s.emulator.now, edit: { $0.aud = "https://appleid.apple.com/" }) }),
        ("aud as array", { s, t in try clientSecret(team: t, clientID: s.clientID, now: s.emulator.now, edit: { $0.aud = .array(["https://appleid.apple.com"]) }) }),
        ("missing aud", { s, t in try clientSecret(team: t, clientID: s.clientID, now: s.emulator.now, edit: { $0.aud = nil }) }),
        ("expired", { s, t in try clientSecret(team: t, clientID: s.clientID, now: s.emulator.now.addingTimeInterval(-7200), lifetime: 3600) }),
        ("lifetime over 15777000 s", { s, t in try clientSecret(team: t, clientID: s.clientID, now: s.emulator.now, lifetime: 15_777_001) }),
        ("issued in the future", { s, t in try clientSecret(team: t, clientID: s.clientID, now: s.emulator.now.addingTimeInterval(3600)) }),
        ("string exp", { s, t in try clientSecret(team: t, clientID: s.clientID, now: s.emulator.now, edit: { $0.exp = "9999999999" }) }),
        ("missing iat", { s, t in try clientSecret(team: t, clientID: s.clientID, now: s.emulator.now, edit: { $0.iat = nil }) }),
    ]

    @Test("every defect of the client secret is invalid_client", arguments: 0..<badSecrets.count)
    func badClientSecret(index: Int) async throws {
        try await Scenario.run(users: 1) { scenario in
            let (name, make) = TokenEndpointTests.badSecrets[index]
            let secret = try make(scenario, scenario.sender)
            let reply = try await scenario.http.postForm("/auth/token", [
                ("grant_type", "client_credentials"), ("scope", "user.migration"), ("client_id", scenario.clientID), ("client_secret", secret),
            ])
            #expect(reply.status == 400, "\(name)")
            #expect(reply.error == "invalid_client", "\(name)")
        }
    }

    @Test("a secret living exactly 15777000 s is accepted")
    func maximumLifetime() async throws {
        try await Scenario.run(users: 1) { scenario in
            let secret = try clientSecret(team: scenario.sender, clientID: scenario.clientID, now: scenario.emulator.now, lifetime: 15_777_000)
            #expect(try await scenario.http.accessToken(clientID: scenario.clientID, secret: secret).isEmpty == false)
        }
    }

    @Test("a team that does not own the app is invalid_client")
    func wrongTeam() async throws {
        try await Scenario.run(users: 1) { scenario in
            let reply = try await scenario.http.postForm("/auth/token", [
                ("grant_type", "client_credentials"), ("scope", "user.migration"), ("client_id", scenario.clientID), ("client_secret", try scenario.secret(scenario.recipient)),
            ])
            #expect(reply.error == "invalid_client")
        }
    }

    @Test("authorization_code gives id_token, access_token and refresh_token once; refresh_token works")
    func authorizationCode() async throws {
        try await Scenario.run(users: 1) { scenario in
            let authorization = try await scenario.http.postJSON("/emulator/authorize", ["client_id": .string(scenario.clientID), "user": .string(scenario.users[0].id)])
            let code = try #require(authorization.json["code"]?.stringValue)
            let fields = [("grant_type", "authorization_code"), ("code", code), ("client_id", scenario.clientID), ("client_secret", try scenario.secret(scenario.sender))]
            let reply = try await scenario.http.postForm("/auth/token", fields)
            #expect(reply.status == 200)
            #expect(reply.json["token_type"] == "Bearer")
            #expect(reply.headers["cache-control"] == "no-store")
            let idToken = try #require(reply.json["id_token"]?.stringValue)
            let claims = try await scenario.verifiedClaims(idToken)
            #expect(claims["sub"]?.stringValue == scenario.users[0].userIdentifier)
            let codeHash = Base64URL.encode(Digest.sha256(Array(code.utf8)).prefix(16))
            #expect(claims["c_hash"]?.stringValue == codeHash)
            #expect(reply.json["access_token"]?.stringValue != nil)
            let refreshToken = try #require(reply.json["refresh_token"]?.stringValue)

            let again = try await scenario.http.postForm("/auth/token", fields)
            #expect(again.error == "invalid_grant")

            let refreshed = try await scenario.http.postForm("/auth/token", [("grant_type", "refresh_token"), ("refresh_token", refreshToken), ("client_id", scenario.clientID), ("client_secret", try scenario.secret(scenario.sender))])
            #expect(refreshed.status == 200)
            let refreshedToken = try #require(refreshed.json["id_token"]?.stringValue)
            #expect(try await scenario.verifiedClaims(refreshedToken)["sub"]?.stringValue == scenario.users[0].userIdentifier)

            let unknown = try await scenario.http.postForm("/auth/token", [("grant_type", "authorization_code"), ("code", "cbogus"), ("client_id", scenario.clientID), ("client_secret", try scenario.secret(scenario.sender))])
            #expect(unknown.error == "invalid_grant")
        }
    }
}

/// Re-encodes a raw r||s signature as DER (what OpenSSL produces natively), to prove it is refused.
func derSignature(_ raw: [UInt8]) -> [UInt8] {
    func integer(_ bytes: ArraySlice<UInt8>) -> [UInt8] {
        var value = Array(bytes.drop { $0 == 0 })
        if value.isEmpty { value = [0] }
        if value[0] & 0x80 != 0 { value.insert(0, at: 0) }
        return [0x02, UInt8(value.count)] + value
    }
    let body = integer(raw[0..<32]) + integer(raw[32..<64])
    return [0x30, UInt8(body.count)] + body
}
