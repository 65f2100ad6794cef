import BatonAppleSignIn
import BatonConcurrency
import Dispatch
import Foundation
import BatonJOSE
import BatonLogging
import Synchronization

/// The emulator's engine: state, keys, clock, faults. Both the HTTP routes and the in-process
/// ``AppleEmulator`` API call it, so tests that skip HTTP exercise the same rules.
final class Emulator: Sendable {
    /// The issuer of identity tokens and the audience of client secrets.
    static let issuer = "https://appleid.apple.com"
    /// The longest a client secret may live: `exp - iat` at most 15,777,000 s (six months).
    static let maxClientSecretLifetime: Int64 = 15_777_000
    /// Clock skew tolerated on a client secret's `iat`.
    static let clientSecretSkew: Int64 = 60
    /// Lifetime of identity tokens.
    static let identityTokenLifetime: Int64 = 600

    private let state: Mutex<EmulatorState>
    private let keys: Mutex<KeyRing>
    let faults = FaultInjector()
    let statePath: String?
    let logger: Logger
    /// Sizes of `accessTokens` and `codes` above which the expired ones are purged: 100,000, then twice what
    /// a purge left, so a million sign-ins within a code's lifetime purge a few times, not on every call.
    private let purgeLimits = Mutex((accessTokens: 100_000, codes: 100_000))
    /// Client secrets whose signature verified, with their key ID, the key it verified against and their claims:
    /// a secret is reused for every call of a job (ten million in a rehearsal), and its parsing and ES256
    /// verification cost more than the rest of the call. A hit skips only the parsing and the signature check,
    /// and only while the key ID still names that same key; the claims (team, client, audience, times) are
    /// checked on every call. At most 64 entries.
    private let verifiedSecrets = Mutex<[String: VerifiedSecret]>([:])

    private struct VerifiedSecret {
        var kid: String
        var key: P256PublicKey
        var claims: JSONObject
    }
    private let saveQueue = DispatchQueue(label: "baton.emulator.state")
    private let savePending = Mutex(false)

    /// Parsed keys derived from the state: the signer, the published set, and the teams' public keys.
    struct KeyRing: Sendable {
        var signerKID: String
        var signer: RSAPrivateKey
        var jwks: JWKSet
        var jwksBody: [UInt8]
        /// Key ID → (team ID, public key) of every team's ES256 key.
        var teamKeys: [String: (teamID: String, key: P256PublicKey)]
    }

    /// Loads the state from `statePath` when that file exists, else starts empty with two signing keys.
    /// Reads a file and may generate RSA keys: call it off the cooperative pool (see ``offPool(_:)``).
    /// - Throws: ``EmulatorError`` `state_file` when the file cannot be read or holds bad keys.
    init(statePath: String?, logger: Logger) throws(EmulatorError) {
        self.statePath = statePath
        self.logger = logger
        var initial = EmulatorState()
        if let statePath, FileManager.default.fileExists(atPath: statePath) {
            do {
                let data = try Data(contentsOf: URL(fileURLWithPath: statePath))
                let decoder = JSONDecoder()
                decoder.dateDecodingStrategy = .secondsSince1970
                initial = try decoder.decode(EmulatorState.self, from: data)
            } catch {
                throw EmulatorError(.stateFile, "cannot read \(statePath)")
            }
        }
        if initial.signingKeys.isEmpty {
            let now = Date().addingTimeInterval(initial.clockOffset)
            initial.signingKeys = try Emulator.initialKeyMaterial().map { EmulatorState.SigningKey(kid: Identifiers.tenCharacters(), pem: $0, createdAt: now) }
        }
        keys = Mutex(try Emulator.keyRing(for: initial))
        state = Mutex(initial)
    }

    // MARK: - Clock

    /// The emulator's current time: the real clock plus the offset set through `POST /emulator/clock`.
    var now: Date { state.withLock { Date().addingTimeInterval($0.clockOffset) } }

    /// Moves the clock forward (or back) by `seconds`.
    func advanceClock(by seconds: Double) throws(EmulatorError) -> Date {
        guard seconds.isFinite, abs(seconds) <= 100 * 365 * 86_400 else { throw EmulatorError(.badInput, "advance_seconds out of range") }
        let now = state.withLock { state in
            state.clockOffset += seconds
            return Date().addingTimeInterval(state.clockOffset)
        }
        scheduleSave()
        return now
    }

    /// Sets the clock to `date`.
    func setClock(to date: Date) throws(EmulatorError) -> Date {
        state.withLock { $0.clockOffset = date.timeIntervalSinceNow }
        scheduleSave()
        return date
    }

    // MARK: - Keys

    /// RSA key material for new emulators, generated once per process.
    private static let initialKeys = Mutex<[String]>([])

    /// Two RSA-2048 private keys (PEM) for a new emulator's first signing keys.
    ///
    /// Generating RSA keys costs about 0.15 s of CPU each, and test suites start dozens of
    /// emulators, so emulators of one process share this material, each under its own random
    /// kids (a token of one emulator still names a kid the others do not publish). Keys made by
    /// ``rotateKeys()`` are always new.
    private static func initialKeyMaterial() throws(EmulatorError) -> [String] {
        let existing = initialKeys.withLock { $0 }
        if existing.count == 2 { return existing }
        let generated = [try newSigningKey(now: Date()).pem, try newSigningKey(now: Date()).pem]
        return initialKeys.withLock { keys in
            if keys.count != 2 { keys = generated }
            return keys
        }
    }

    private static func newSigningKey(now: Date) throws(EmulatorError) -> EmulatorState.SigningKey {
        do {
            return EmulatorState.SigningKey(kid: Identifiers.tenCharacters(), pem: try RSAPrivateKey.generate(bits: 2048).pem(), createdAt: now)
        } catch {
            throw EmulatorError(.stateFile, "cannot generate an RSA key")
        }
    }

    private static func keyRing(for state: EmulatorState) throws(EmulatorError) -> KeyRing {
        do {
            let published = state.signingKeys.suffix(EmulatorState.publishedKeyCount)
            var jwks: [JWK] = []
            var signer: (String, RSAPrivateKey)?
            for entry in published {
                let key = try RSAPrivateKey(pem: entry.pem)
                jwks.append(JWK(key: .rsa(key.publicKey), kid: entry.kid, use: "sig", alg: "RS256"))
                signer = (entry.kid, key)
            }
            guard let signer else { throw EmulatorError(.stateFile, "no signing key") }
            var teamKeys: [String: (teamID: String, key: P256PublicKey)] = [:]
            for team in state.teams.values {
                for (keyID, pem) in team.keys {
                    teamKeys[keyID] = (team.teamID, try P256PrivateKey(pkcs8PEM: pem).publicKey)
                }
            }
            // Newest first, as a key server lists its current key first.
            let set = JWKSet(keys: jwks.reversed())
            return KeyRing(signerKID: signer.0, signer: signer.1, jwks: set, jwksBody: JSON.serializeBytes(set.json()), teamKeys: teamKeys)
        } catch let error as EmulatorError {
            throw error
        } catch {
            throw EmulatorError(.stateFile, "a stored key cannot be read")
        }
    }

    /// The published key set (`GET /auth/keys`).
    var jwks: JWKSet { keys.withLock { $0.jwks } }

    /// The serialized published key set.
    var jwksBody: [UInt8] { keys.withLock { $0.jwksBody } }

    /// Adds a signing key that signs from now on; the previous ones stay published until
    /// ``EmulatorState/publishedKeyCount`` newer keys exist. Returns the new key ID.
    func rotateKeys() async throws(EmulatorError) -> String {
        let now = self.now
        let key = try await offPool { () throws(EmulatorError) in try Emulator.newSigningKey(now: now) }
        let snapshot = state.withLock { state in
            state.signingKeys.append(key)
            return state
        }
        let ring = try Emulator.keyRing(for: snapshot)
        keys.withLock { $0 = ring }
        scheduleSave()
        return key.kid
    }

    // MARK: - Scenario control

    /// Registers a team with a new ES256 key; returns its key ID and the key as PKCS#8 PEM.
    func createTeam(_ teamID: String?) throws(EmulatorError) -> (teamID: String, keyID: String, privateKeyPEM: String) {
        let privateKey: P256PrivateKey
        do { privateKey = try P256PrivateKey.generate() } catch { throw EmulatorError(.stateFile, "cannot generate an EC key") }
        let pem = privateKey.pkcs8PEM()
        let (team, keyID) = try state.withLock { (state) throws(EmulatorError) -> (String, String) in
            var team = teamID ?? Identifiers.tenCharacters()
            if teamID == nil { while state.teams[team] != nil { team = Identifiers.tenCharacters() } }
            var keyID = Identifiers.tenCharacters()
            while state.teams.values.contains(where: { $0.keys[keyID] != nil }) { keyID = Identifiers.tenCharacters() }
            try state.addTeam(team, keyID: keyID, keyPEM: pem)
            return (team, keyID)
        }
        keys.withLock { $0.teamKeys[keyID] = (team, privateKey.publicKey) }
        scheduleSave()
        return (team, keyID, pem)
    }

    func createApp(clientID: String, teamID: String) throws(EmulatorError) {
        try state.withLock { (state) throws(EmulatorError) in try state.addApp(clientID, teamID: teamID) }
        scheduleSave()
    }

    func createUsers(clientID: String, count: Int, privateEmail: Bool?, userIdentifiers: [String?]? = nil, transferIdentifiers: [String?]? = nil,
                     transferTarget: String? = nil) throws(EmulatorError) -> [EmulatedUser] {
        let users = try state.withLock { (state) throws(EmulatorError) -> [EmulatedUser] in
            let people = try state.addUsers(clientID: clientID, count: count, privateEmail: privateEmail, userIdentifiers: userIdentifiers,
                                            transferIdentifiers: transferIdentifiers, transferTarget: transferTarget)
            let team = state.apps[clientID]!.ownerTeamID
            return people.map { person in
                let (email, isPrivate) = state.email(of: person.id, team: team)
                return EmulatedUser(id: person.id, userIdentifier: state.identifier(of: person.id, team: team), email: email, isPrivateEmail: isPrivate)
            }
        }
        scheduleSave()
        return users
    }

    func createCohort(clientID: String, toTeamID: String) throws(EmulatorError) {
        try state.withLock { (state) throws(EmulatorError) in try state.addCohort(clientID: clientID, toTeamID: toTeamID) }
        scheduleSave()
    }

    func initiateTransfer(clientID: String, toTeamID: String) throws(EmulatorError) {
        let now = self.now
        try state.withLock { (state) throws(EmulatorError) in try state.initiateTransfer(clientID: clientID, toTeamID: toTeamID, now: now) }
        scheduleSave()
    }

    func acceptTransfer(clientID: String) throws(EmulatorError) -> Date {
        let now = self.now
        let transfer = try state.withLock { (state) throws(EmulatorError) in try state.acceptTransfer(clientID: clientID, now: now) }
        scheduleSave()
        return transfer.acceptedAt ?? now
    }

    func revoke(clientID: String, userIdentifier: String) throws(EmulatorError) {
        try state.withLock { (state) throws(EmulatorError) in try state.revoke(clientID: clientID, userIdentifier: userIdentifier) }
        scheduleSave()
    }

    func credentialState(clientID: String, userIdentifier: String) -> CredentialState {
        state.withLock { $0.credentialState(clientID: clientID, userIdentifier: userIdentifier) }
    }

    /// Sender-side transfer identifiers for every current user of `clientID`, as the owning team
    /// would generate them for `target` (the pending or accepted transfer's recipient).
    func transferIdentifiers(clientID: String) throws(EmulatorError) -> [String: String] {
        let now = self.now
        let result = try state.withLock { (state) throws(EmulatorError) -> [String: String] in
            guard let app = state.apps[clientID] else { throw EmulatorError(.unknownApp, clientID) }
            guard let transfer = app.transfers.last else { throw EmulatorError(.conflict, "no transfer of \(clientID)") }
            var result: [String: String] = [:]
            for personID in app.users where !app.revoked.contains(personID) {
                let sub = state.identifier(of: personID, team: transfer.fromTeamID)
                result[sub] = try state.senderTransferIdentifier(clientID: clientID, teamID: transfer.fromTeamID, sub: sub, target: transfer.toTeamID, now: now)
            }
            return result
        }
        scheduleSave()
        return result
    }

    // MARK: - Apple's endpoints

    /// Validates a client secret fully and returns the team it authenticates.
    ///
    /// ES256 with a raw 64-byte signature; `kid` a key registered for a team; `iss` that team;
    /// `sub` the client ID; `aud` Apple; `iat` not in the future (60 s skew); not expired;
    /// `exp - iat` at most 15,777,000 s.
    /// - Throws: ``EmulatorError`` `invalid_client` for any failure.
    func authenticate(clientSecret: String, clientID: String, now: Date) throws(EmulatorError) -> String {
        func refuse(_ reason: String) -> EmulatorError { EmulatorError(.invalidClient, reason) }
        let registered: (teamID: String, key: P256PublicKey)
        let claims: JSONObject
        if let verified = verifiedSecrets.withLock({ $0[clientSecret] }), let current = keys.withLock({ $0.teamKeys[verified.kid] }),
           current.key === verified.key {
            (registered, claims) = (current, verified.claims)
        } else {
            guard let jws = try? CompactJWS.parse(clientSecret) else { throw refuse("client_secret is not a compact JWS") }
            guard jws.header.alg == "ES256" else { throw refuse("client_secret must be ES256") }
            guard let kid = jws.header.kid, let found = keys.withLock({ $0.teamKeys[kid] }) else {
                throw refuse("client_secret kid is not registered")
            }
            guard jws.signature.count == 64, found.key.verifyES256(signature: jws.signature, message: jws.signingInput) else {
                throw refuse("client_secret signature does not verify")
            }
            guard let parsed = try? jws.claims() else { throw refuse("client_secret claims are not a JSON object") }
            (registered, claims) = (found, parsed)
            verifiedSecrets.withLock { secrets in
                if secrets.count >= 64 { secrets.removeAll() }
                secrets[clientSecret] = VerifiedSecret(kid: kid, key: found.key, claims: parsed)
            }
        }
        guard claims["iss"]?.stringValue == registered.teamID else { throw refuse("client_secret iss is not the key's team") }
        guard claims["sub"]?.stringValue == clientID else { throw refuse("client_secret sub is not client_id") }
        guard claims["aud"]?.stringValue == Emulator.issuer else { throw refuse("client_secret aud is not \(Emulator.issuer)") }
        guard let iat = claims["iat"]?.intValue, let exp = claims["exp"]?.intValue else {
            throw refuse("client_secret needs numeric iat and exp")
        }
        let current = Int64(now.timeIntervalSince1970.rounded(.down))
        guard iat <= current + Emulator.clientSecretSkew else { throw refuse("client_secret issued in the future") }
        guard exp > current else { throw refuse("client_secret expired") }
        guard exp > iat, exp - iat <= Emulator.maxClientSecretLifetime else {
            throw refuse("client_secret lifetime exceeds 15777000 seconds")
        }
        return registered.teamID
    }

    /// `grant_type=client_credentials`: an access token for the authenticated team and client.
    func issueAccessToken(clientID: String, teamID: String, now: Date) throws(EmulatorError) -> String {
        try state.withLock { (state) throws(EmulatorError) -> String in
            guard let app = state.apps[clientID], EmulatorState.teamActsFor(app, teamID: teamID, now: now) else {
                throw EmulatorError(.invalidClient, "client_id does not belong to this team")
            }
            if state.accessTokens.count > purgeLimits.withLock({ $0.accessTokens }) { purge(&state, now: now) }
            let token = Identifiers.opaque("a")
            state.accessTokens[token] = EmulatorState.AccessToken(teamID: teamID, clientID: clientID, expiresAt: now.addingTimeInterval(EmulatorState.accessTokenLifetime))
            return token
        }
    }

    /// Checks that `teamID` owns `clientID`, or is sending it in a transfer that is pending or within its window.
    /// - Throws: ``EmulatorError`` `invalid_client` otherwise.
    func checkTeamActs(for clientID: String, teamID: String, now: Date) throws(EmulatorError) {
        let acts = state.withLock { state in state.apps[clientID].map { EmulatorState.teamActsFor($0, teamID: teamID, now: now) } ?? false }
        guard acts else { throw EmulatorError(.invalidClient, "client_id does not belong to this team") }
    }

    /// Checks a bearer token against the team and client it must have been issued to.
    func checkAccessToken(_ token: String, clientID: String, teamID: String, now: Date) throws(EmulatorError) {
        let record = state.withLock { $0.accessTokens[token] }
        guard let record, record.teamID == teamID, record.clientID == clientID, record.expiresAt > now else {
            throw EmulatorError(.invalidGrant, "access token unknown, expired or issued to another client")
        }
    }

    func senderTransferIdentifier(clientID: String, teamID: String, sub: String, target: String, now: Date) throws(EmulatorError) -> String {
        try state.withLock { (state) throws(EmulatorError) in
            try state.senderTransferIdentifier(clientID: clientID, teamID: teamID, sub: sub, target: target, now: now)
        }
    }

    func exchange(clientID: String, teamID: String, transferSub: String, now: Date) throws(EmulatorError) -> (sub: String, email: String?, isPrivate: Bool) {
        try state.withLock { (state) throws(EmulatorError) in
            try state.exchange(clientID: clientID, teamID: teamID, transferSub: transferSub, now: now)
        }
    }

    /// `grant_type=authorization_code`: redeems a code once, for the team that owned the app when it was issued.
    func redeem(code: String, clientID: String, teamID: String, now: Date) throws(EmulatorError) -> (idToken: String, accessToken: String, refreshToken: String) {
        try state.withLock { (state) throws(EmulatorError) in
            guard let record = state.codes[code], record.clientID == clientID, record.expiresAt > now else {
                throw EmulatorError(.invalidGrant, "authorization code unknown, expired, used or issued to another client")
            }
            guard record.teamID == teamID else { throw EmulatorError(.invalidClient, "the code was issued to another team") }
            state.codes[code] = nil
            let accessToken = Identifiers.opaque("a")
            state.accessTokens[accessToken] = EmulatorState.AccessToken(teamID: teamID, clientID: clientID, expiresAt: now.addingTimeInterval(EmulatorState.accessTokenLifetime))
            let refreshToken = Identifiers.opaque("r")
            state.refreshTokens[refreshToken] = EmulatorState.RefreshToken(clientID: clientID, personID: record.personID, teamID: teamID)
            return (record.idToken, accessToken, refreshToken)
        }
    }

    /// `grant_type=refresh_token`: a new identity token and access token for the refresh token's user.
    func refresh(token: String, clientID: String, teamID: String, now: Date) throws(EmulatorError) -> (idToken: String, accessToken: String) {
        let personID = try state.withLock { (state) throws(EmulatorError) -> String in
            guard let record = state.refreshTokens[token], record.clientID == clientID else {
                throw EmulatorError(.invalidGrant, "refresh token unknown or issued to another client")
            }
            guard record.teamID == teamID else { throw EmulatorError(.invalidClient, "the refresh token belongs to another team") }
            guard let app = state.apps[clientID], app.ownerTeamID == teamID, !app.revoked.contains(record.personID) else {
                throw EmulatorError(.invalidGrant, "the user revoked the app or the app changed team")
            }
            return record.personID
        }
        let authorization = try authorize(clientID: clientID, user: personID, nonce: nil, issueCode: false)
        let accessToken = state.withLock { state in
            let value = Identifiers.opaque("a")
            state.accessTokens[value] = EmulatorState.AccessToken(teamID: teamID, clientID: clientID, expiresAt: now.addingTimeInterval(EmulatorState.accessTokenLifetime))
            return value
        }
        return (authorization.idToken, accessToken)
    }

    // MARK: - Devices

    /// What `ASAuthorizationController` would return: a signed identity token and an authorization code.
    func authorize(clientID: String, user: String, nonce: String?, issueCode: Bool = true) throws(EmulatorError) -> Authorization {
        let now = self.now
        let code = issueCode ? Identifiers.opaque("c") : nil
        let (claims, personID, teamID, sub) = try state.withLock { (state) throws(EmulatorError) -> (JSONObject, String, String, String) in
            guard let app = state.apps[clientID] else { throw EmulatorError(.unknownApp, clientID) }
            guard let personID = state.person(named: user) else { throw EmulatorError(.unknownUser, "no such person or identifier") }
            // A first sign-in makes the person a user; signing in again after revoking re-consents.
            // Mutated in place, and only when needed, so large apps are not copied per call.
            if !state.uses(app, personID) || app.revoked.contains(personID) {
                state.apps[clientID]?.users.insert(personID)
                state.apps[clientID]?.revoked.remove(personID)
            }
            let team = app.ownerTeamID
            let sub = state.identifier(of: personID, team: team)
            let (email, isPrivate) = state.email(of: personID, team: team)
            let issuedAt = Int64(now.timeIntervalSince1970.rounded(.down))
            var claims: JSONObject = [
                "iss": .string(Emulator.issuer),
                "aud": .string(clientID),
                "exp": .number(Double(issuedAt + Emulator.identityTokenLifetime)),
                "iat": .number(Double(issuedAt)),
                "sub": .string(sub),
            ]
            if let code { claims["c_hash"] = .string(Base64URL.encode(Digest.sha256(Array(code.utf8)).prefix(16))) }
            if let nonce { claims["nonce"] = .string(nonce) }
            claims["email"] = .string(email)
            claims["email_verified"] = .bool(true)
            if isPrivate { claims["is_private_email"] = .bool(true) }
            claims["auth_time"] = .number(Double(issuedAt))
            claims["nonce_supported"] = .bool(true)
            // Every user the sending team knew gets transfer_sub during the window, generated or not: the same
            // identifier the sender's /auth/usermigrationinfo gives for this user and the recipient team.
            if let transfer = EmulatorState.activeAcceptedTransfer(of: app, now: now),
               state.isKnown(personID, to: transfer.fromTeamID) {
                claims["transfer_sub"] = .string(state.transferIdentifier(of: personID, from: transfer.fromTeamID, to: transfer.toTeamID))
            }
            return (claims, personID, team, sub)
        }
        let (kid, signer) = keys.withLock { ($0.signerKID, $0.signer) }
        let token: String
        do {
            token = try JWS.signRS256(payload: JSON.serializeBytes(.object(claims)), key: signer, kid: kid)
        } catch {
            throw EmulatorError(.stateFile, "signing failed")
        }
        if let code {
            state.withLock { state in
                if state.codes.count > purgeLimits.withLock({ $0.codes }) { purge(&state, now: now) }
                state.codes[code] = EmulatorState.AuthorizationCode(clientID: clientID, personID: personID, teamID: teamID, nonce: nonce, expiresAt: now.addingTimeInterval(EmulatorState.codeLifetime), idToken: token)
            }
        }
        return Authorization(idToken: token, code: code ?? "", userIdentifier: sub)
    }

    /// Purges expired access tokens and codes, and sets the next limits (called with the state locked).
    private func purge(_ state: inout EmulatorState, now: Date) {
        state.purgeExpired(now: now)
        let left = (accessTokens: state.accessTokens.count, codes: state.codes.count)
        purgeLimits.withLock { $0 = (max(100_000, 2 * left.accessTokens), max(100_000, 2 * left.codes)) }
    }

    // MARK: - Persistence

    /// Writes the state file soon, on the save queue (never on Swift's cooperative pool); saves
    /// requested while one is pending are coalesced. A failure is logged (``flush()`` reports it).
    func scheduleSave() {
        guard statePath != nil else { return }
        let alreadyPending = savePending.withLock { pending in
            defer { pending = true }
            return pending
        }
        guard !alreadyPending else { return }
        saveQueue.async { [self] in
            savePending.withLock { $0 = false }
            do { try writeState() } catch { logger.error("cannot save emulator state", ["error": String(describing: error)]) }
        }
    }

    /// Waits for pending saves, then writes the state file once more.
    /// - Throws: ``EmulatorError`` `state_file` when it cannot be written.
    func flush() async throws(EmulatorError) {
        guard statePath != nil else { return }
        try await offPool(on: saveQueue) { [self] () throws(EmulatorError) in try writeState() }
    }

    /// Writes the state file atomically (a temporary file renamed). Runs on the save queue.
    private func writeState() throws(EmulatorError) {
        guard let statePath else { return }
        let snapshot = state.withLock { $0 }
        do {
            let encoder = JSONEncoder()
            encoder.dateEncodingStrategy = .secondsSince1970
            encoder.outputFormatting = [.sortedKeys]
            try encoder.encode(snapshot).write(to: URL(fileURLWithPath: statePath), options: .atomic)
            // The file holds the emulated teams' private keys: readable by its owner only.
            try FileManager.default.setAttributes([.posixPermissions: 0o600], ofItemAtPath: statePath)
        } catch {
            throw EmulatorError(.stateFile, "cannot write \(statePath)")
        }
    }
}

/// One emulated person as `POST /emulator/users` returns them.
public struct EmulatedUser: Sendable, Equatable, Codable {
    /// The person's stable emulator ID (`person-000001`), the same under every team.
    public var id: String
    /// Their team-scoped identifier under the app's current team.
    public var userIdentifier: String
    /// The address they share with that team (a relay address when private).
    public var email: String
    /// Whether `email` is a private relay address.
    public var isPrivateEmail: Bool

    enum CodingKeys: String, CodingKey {
        case id, email
        case userIdentifier = "user_identifier"
        case isPrivateEmail = "is_private_email"
    }
}

/// What a simulated device receives from a sign-in.
public struct Authorization: Sendable, Equatable {
    /// The RS256 identity token.
    public var idToken: String
    /// A single-use authorization code for `grant_type=authorization_code` (valid 5 minutes).
    public var code: String
    /// The team-scoped identifier (`sub`) under the app's current team.
    public var userIdentifier: String
}
