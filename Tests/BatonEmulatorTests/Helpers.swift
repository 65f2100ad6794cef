import BatonEmulator
import Foundation
import FoundationNetworking
import BatonJOSE
import BatonJSON
import TestSupport

/// An HTTP answer from the emulator, with its body parsed as JSON.
struct Reply {
    var status: Int
    var headers: [String: String]
    var json: JSONValue
    var text: String

    /// Apple's `error` member.
    var error: String? { json["error"]?.stringValue }
}

/// Talks to a running emulator over loopback with URLSession.
struct EmulatorHTTP {
    let base: URL

    init(_ emulator: AppleEmulator) { base = emulator.baseURL }

    func send(_ method: String, _ path: String, body: Data? = nil, contentType: String? = nil, headers: [String: String] = [:]) async throws -> Reply {
        var request = URLRequest(url: URL(string: base.absoluteString + path)!)
        request.httpMethod = method
        request.httpBody = body
        if let contentType { request.setValue(contentType, forHTTPHeaderField: "Content-Type") }
        for (name, value) in headers { request.setValue(value, forHTTPHeaderField: name) }
        let (data, response) = try await URLSession.shared.data(for: request)
        let http = response as! HTTPURLResponse
        var fields: [String: String] = [:]
        for (name, value) in http.allHeaderFields { fields[String(describing: name).lowercased()] = String(describing: value) }
        let json = (try? JSON.parse(Array(data))) ?? .null
        return Reply(status: http.statusCode, headers: fields, json: json, text: String(decoding: data, as: UTF8.self))
    }

    func get(_ path: String) async throws -> Reply { try await send("GET", path) }

    func postJSON(_ path: String, _ object: JSONObject) async throws -> Reply {
        try await send("POST", path, body: Data(JSON.serializeBytes(.object(object))), contentType: "application/json")
    }

    func postForm(_ path: String, _ fields: [(String, String)], bearer: String? = nil) async throws -> Reply {
        let body = fields.map { "\(formEncode($0.0))=\(formEncode($0.1))" }.joined(separator: "&")
        return try await send("POST", path, body: Data(body.utf8), contentType: "application/x-www-form-urlencoded",
                              headers: bearer.map { ["Authorization": "Bearer \($0)"] } ?? [:])
    }

    /// `POST /auth/token` with client credentials; returns the access token or fails the test's throw.
    func accessToken(clientID: String, secret: String) async throws -> String {
        let reply = try await postForm("/auth/token", [("grant_type", "client_credentials"), ("scope", "user.migration"), ("client_id", clientID), ("client_secret", secret)])
        guard reply.status == 200, let token = reply.json["access_token"]?.stringValue else {
            throw HelperError("token request failed: \(reply.status) \(reply.text)")
        }
        return token
    }
}

struct HelperError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

func formEncode(_ text: String) -> String {
    var allowed = CharacterSet.alphanumerics
    allowed.insert(charactersIn: "-._*")
    return text.addingPercentEncoding(withAllowedCharacters: allowed)!
}

/// Claims of a client secret, overridable one by one for negative tests.
struct SecretClaims {
    var iss: JSONValue?
    var sub: JSONValue?
    var aud: JSONValue? = .string("https://appleid.apple.com")
    var iat: JSONValue?
    var exp: JSONValue?
}

/// Builds a client secret as `baton client-secret` would (ES256, raw r||s), for `team` and `clientID`
/// at `now`, letting a test change any part.
func clientSecret(
    team: TeamCredentials,
    clientID: String,
    now: Date,
    lifetime: Int64 = 86_400,
    signingKeyPEM: String? = nil,
    kid: String? = nil,
    alg: String = "ES256",
    edit: (inout SecretClaims) -> Void = { _ in },
    signature: (([UInt8]) throws -> [UInt8])? = nil
) throws -> String {
    let issuedAt = Int64(now.timeIntervalSince1970)
    var claims = SecretClaims(iss: .string(team.teamID), sub: .string(clientID),
                              iat: .number(Double(issuedAt)), exp: .number(Double(issuedAt + lifetime)))
    edit(&claims)
    var object = JSONObject()
    if let iss = claims.iss { object["iss"] = iss }
    if let iat = claims.iat { object["iat"] = iat }
    if let exp = claims.exp { object["exp"] = exp }
    if let aud = claims.aud { object["aud"] = aud }
    if let sub = claims.sub { object["sub"] = sub }
    let key = try P256PrivateKey(pkcs8PEM: signingKeyPEM ?? team.privateKeyPEM)
    let header: JSONObject = ["alg": .string(alg), "kid": .string(kid ?? team.keyID)]
    return try JWS.compact(header: header, payload: JSON.serializeBytes(.object(object))) { input in
        if let signature { return try signature(input) }
        return try key.signES256(input)
    }
}

/// A transfer scenario: team A owns `com.example.app` with users; team B is the recipient.
struct Scenario {
    let emulator: AppleEmulator
    let http: EmulatorHTTP
    let sender: TeamCredentials
    let recipient: TeamCredentials
    let users: [EmulatedUser]
    let clientID = "com.example.app"

    /// Runs `body` on a fresh scenario with `count` users and stops the emulator afterwards, whatever happens.
    static func run(users count: Int = 4, _ body: (Scenario) async throws -> Void) async throws {
        try await withEmulator { emulator in
            let sender = try emulator.createTeam("AAAAAAAAAA")
            let recipient = try emulator.createTeam("BBBBBBBBBB")
            try emulator.createApp(clientID: "com.example.app", teamID: sender.teamID)
            let users = try emulator.createUsers(clientID: "com.example.app", count: count)
            try await body(Scenario(emulator: emulator, http: EmulatorHTTP(emulator), sender: sender, recipient: recipient, users: users))
        }
    }

    func secret(_ team: TeamCredentials) throws -> String { try clientSecret(team: team, clientID: clientID, now: emulator.now) }

    /// Sender side: the transfer identifier of `sub`.
    func senderCall(sub: String, target: String? = nil, token: String? = nil, team: TeamCredentials? = nil) async throws -> Reply {
        let team = team ?? sender
        let secret = try secret(team)
        let bearer: String
        if let token { bearer = token } else { bearer = try await http.accessToken(clientID: clientID, secret: secret) }
        return try await http.postForm("/auth/usermigrationinfo", [("sub", sub), ("target", target ?? recipient.teamID), ("client_id", clientID), ("client_secret", secret)], bearer: bearer)
    }

    /// Recipient side: the identity behind `transferSub`.
    func recipientCall(transferSub: String, token: String? = nil, team: TeamCredentials? = nil) async throws -> Reply {
        let team = team ?? recipient
        let secret = try secret(team)
        let bearer: String
        if let token { bearer = token } else { bearer = try await http.accessToken(clientID: clientID, secret: secret) }
        return try await http.postForm("/auth/usermigrationinfo", [("transfer_sub", transferSub), ("client_id", clientID), ("client_secret", secret)], bearer: bearer)
    }

    /// Initiates the transfer, generates every user's transfer identifier over HTTP (users who revoked
    /// get none), and accepts the transfer.
    func transferAll() async throws -> [String: String] {
        try emulator.initiateTransfer(clientID: clientID, toTeamID: recipient.teamID)
        var result: [String: String] = [:]
        for user in users {
            let reply = try await senderCall(sub: user.userIdentifier)
            if reply.error == "invalid_request" { continue }  // a user who revoked has no identifier
            guard let transferSub = reply.json["transfer_sub"]?.stringValue else { throw HelperError("no transfer_sub: \(reply.text)") }
            result[user.userIdentifier] = transferSub
        }
        try emulator.acceptTransfer(clientID: clientID)
        return result
    }

    /// The claims of an identity token after checking its signature against the published keys.
    func verifiedClaims(_ token: String) async throws -> JSONObject {
        let keys = try JWKSet(json: Array(try await http.get("/auth/keys").text.utf8))
        let jws = try CompactJWS.parse(token)
        guard let kid = jws.header.kid, let key = keys.key(withID: kid), key.verifies(jws) else {
            throw HelperError("identity token does not verify")
        }
        return try jws.claims()
    }
}
