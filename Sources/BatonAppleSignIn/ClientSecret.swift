import BatonConcurrency
import Foundation
import BatonJOSE
import BatonJSON

/// Makes Apple client secrets: ES256 JWTs signed with a team's Sign in with Apple key (`.p8`).
///
/// Header `{"alg":"ES256","kid":KEY_ID,…}`; claims `iss` (team ID), `iat`, `exp`, `aud`
/// (`https://appleid.apple.com`), `sub` (client ID); signature raw `r||s` (64 bytes), as JWS requires.
/// A secret lives at most ``maximumLifetime`` (15,777,000 s, six months). ``AppleClient`` makes short-lived
/// secrets itself and renews them; `baton client-secret` prints one for manual use.
///
/// The key never leaves this value: `description` shows only the identifiers.
public struct ClientSecret: ClientSecretSigner, CustomStringConvertible, CustomReflectable {
    /// Apple's limit on a secret's lifetime: 15,777,000 s (six months).
    public static let maximumLifetime: TimeInterval = 15_777_000
    /// The `aud` claim: `https://appleid.apple.com`, whatever the base URL (the emulator checks it too).
    public static let audience = "https://appleid.apple.com"

    /// The team that owns the key: the `iss` claim.
    public let teamID: String
    /// The key's ID: the header's `kid`.
    public let keyID: String
    /// The client ID: the `sub` claim.
    public let clientID: String
    private let key: P256PrivateKey

    /// Wraps an already loaded key.
    /// - Throws: ``AppleClientError`` `invalidParameter` when an identifier is malformed (a team ID is 10
    ///   upper-case letters or digits, a key ID 10 letters or digits, a client ID without a team prefix).
    public init(teamID: String, keyID: String, clientID: String, privateKey: P256PrivateKey) throws {
        guard AppleIdentifierFormat.isTeamID(teamID) else {
            throw AppleClientError(.invalidParameter, reason: "team ID must be 10 upper-case letters or digits")
        }
        guard AppleIdentifierFormat.isKeyID(keyID) else {
            throw AppleClientError(.invalidParameter, reason: "key ID must be 10 letters or digits")
        }
        if let problem = AppleIdentifierFormat.clientIDProblem(clientID) {
            throw AppleClientError(.invalidParameter, reason: problem)
        }
        self.teamID = teamID
        self.keyID = keyID
        self.clientID = clientID
        self.key = privateKey
    }

    /// Parses a `.p8` PEM text (PKCS#8, EC P-256).
    /// - Throws: ``AppleClientError`` `keyInvalid` (with the reason: RSA, SEC1, encrypted, public key, other
    ///   curve) or `invalidParameter`.
    public init(teamID: String, keyID: String, clientID: String, pem: String) throws {
        if let problem = ClientSecret.pemProblem(pem) {
            throw AppleClientError(.keyInvalid, reason: problem)
        }
        let key: P256PrivateKey
        do {
            key = try P256PrivateKey(pkcs8PEM: pem)
        } catch {
            throw AppleClientError(.keyInvalid, reason: "not an EC P-256 PKCS#8 private key")
        }
        try self.init(teamID: teamID, keyID: keyID, clientID: clientID, privateKey: key)
    }

    /// Reads and parses a `.p8` file, off Swift's cooperative threads.
    /// - Throws: ``AppleClientError`` `keyUnreadable` (the path in the detail), `keyInvalid`, `invalidParameter`.
    public static func load(teamID: String, keyID: String, clientID: String, keyFile path: String) async throws -> ClientSecret {
        let data = try await readKeyFile(path)
        guard let pem = String(data: data, encoding: .utf8) else {
            throw AppleClientError(.keyInvalid, reason: "\(path) is not PEM text")
        }
        return try ClientSecret(teamID: teamID, keyID: keyID, clientID: clientID, pem: pem)
    }

    /// Reads a key file on a dispatch queue (file reads block).
    /// - Throws: ``AppleClientError`` `keyUnreadable`; `keyExposed` when the file is readable or writable by
    ///   its group or others (``SecretFile/isExposed(_:)``).
    public static func readKeyFile(_ path: String) async throws -> Data {
        try await offPool { () throws(AppleClientError) -> Data in
            if SecretFile.isExposed(path) { throw AppleClientError(.keyExposed, reason: path) }
            guard let data = FileManager.default.contents(atPath: path), data.count <= 64 * 1024 else {
                throw AppleClientError(.keyUnreadable, reason: path)
            }
            return data
        }
    }

    /// The public half, e.g. to register with the emulator or to check a signature.
    public var publicKey: P256PublicKey { key.publicKey }

    /// A secret valid from `issuedAt` (rounded down to the second) for `lifetime` seconds.
    /// - Throws: ``AppleClientError`` `invalidParameter` when `lifetime` is not in 1...15,777,000 s;
    ///   `keyInvalid` if signing fails.
    public func clientSecret(issuedAt: Date, lifetime: TimeInterval) throws -> String {
        guard lifetime >= 1, lifetime <= ClientSecret.maximumLifetime else {
            throw AppleClientError(.invalidParameter, reason: "a client secret lives from 1 to 15777000 seconds (182 days)")
        }
        let iat = Int64(issuedAt.timeIntervalSince1970.rounded(.down))
        let exp = iat + Int64(lifetime.rounded(.down))
        let claims: JSONValue = [
            "iss": .string(teamID), "iat": .number(Double(iat)), "exp": .number(Double(exp)),
            "aud": .string(ClientSecret.audience), "sub": .string(clientID),
        ]
        do {
            return try JWS.signES256(payload: JSON.serializeBytes(claims), key: key, kid: keyID)
        } catch {
            throw AppleClientError(.keyInvalid, reason: "signing failed")
        }
    }

    /// `client secret signer for com.example.app (team AAAAAAAAAA, key KEYA000001)`; never the key.
    public var description: String { "client secret signer for \(clientID) (team \(teamID), key \(keyID))" }

    /// Only the identifiers, so `dump` shows no key either.
    public var customMirror: Mirror { Mirror(self, children: ["teamID": teamID, "keyID": keyID, "clientID": clientID]) }

    /// Why a PEM text is plainly not an Apple `.p8` key, from its armour; nil when it may be one.
    static func pemProblem(_ pem: String) -> String? {
        if pem.contains("-----BEGIN PRIVATE KEY-----") { return nil }
        if pem.contains("-----BEGIN EC PRIVATE KEY-----") {
            return "an SEC1 'EC PRIVATE KEY': convert it with 'openssl pkcs8 -topk8 -nocrypt -in key.pem -out key.p8'"
        }
        if pem.contains("-----BEGIN ENCRYPTED PRIVATE KEY-----") { return "an encrypted key: Apple's .p8 files are not encrypted" }
        if pem.contains("-----BEGIN RSA PRIVATE KEY-----") { return "an RSA key: Sign in with Apple keys are EC P-256" }
        if pem.contains("-----BEGIN PUBLIC KEY-----") || pem.contains("-----BEGIN CERTIFICATE-----") {
            return "a public key or certificate: the private key (.p8) is needed"
        }
        return "not a PEM private key ('-----BEGIN PRIVATE KEY-----' missing)"
    }
}

/// The permission rule for files holding secrets (`.p8` keys, admin and service tokens).
public enum SecretFile {
    /// Whether the file at `path` grants any permission to its group or to others (mode & 0o077): such a file
    /// is refused at start-up. False when the file cannot be inspected (reading it then fails on its own).
    public static func isExposed(_ path: String) -> Bool {
        var status = stat()
        guard stat(path, &status) == 0 else { return false }
        return status.st_mode & 0o077 != 0
    }
}
