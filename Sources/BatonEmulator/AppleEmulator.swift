import BatonAppleSignIn
import BatonConcurrency
import Foundation
import BatonHTTPServer
import BatonJOSE
import BatonLogging

/// A stand-in for `appleid.apple.com` on loopback, for tests, benchmarks, the demo and rehearsals.
/// docs/emulator.md drives `baton emulator` by hand; ``routes`` lists every route.
///
/// ## Apple's endpoints
/// - `GET /auth/keys`: the published RS256 keys (at least two, 10-character kids).
/// - `POST /auth/token`: `client_credentials` (scope `user.migration`), `authorization_code`
///   (codes from `/emulator/authorize`) and `refresh_token`; the client secret is validated fully
///   (ES256 with a raw 64-byte signature, a `kid` registered to the team named by `iss`, `sub` the client ID, `aud` Apple, not expired, `exp - iat` at most 15,777,000 s, `iat` at most 60 s ahead). Errors are Apple's: 400 with
///   `{"error": "invalid_client" | "invalid_request" | "invalid_grant" | "unsupported_grant_type" | "invalid_scope"}`.
/// - `POST /auth/usermigrationinfo`: the sender side (`sub`, `target`) and the recipient side
///   (`transfer_sub`), with a bearer token from `/auth/token`.
///
/// ## Timing, as Apple runs a transfer
/// - The sending team may call `/auth/usermigrationinfo` (`sub`, `target`) from the moment it owns the app,
///   before the transfer is initiated, until 60 days after acceptance; the recipient (`transfer_sub`) from
///   acceptance until 60 days later. The window is inclusive: 5,184,000 s after acceptance still answers.
/// - During the window, the identity token of every user the sending team knew carries `transfer_sub`, whether
///   or not the sender generated it: the same identifier the sender gets for that user and the recipient team.
/// - After the window: the sender no longer owns the app, so `/auth/token` and `/auth/usermigrationinfo` answer
///   `invalid_client`; the recipient owns the app and gets its access token, and `/auth/usermigrationinfo`
///   answers `invalid_request` (its credentials are good; the request for a transfer identifier is what is no
///   longer valid). docs/troubleshooting.md lists every side and stage in one table, which the emulator's tests
///   read and check row by row.
///
/// ## Faults
/// `POST /emulator/faults` applies to `/auth/*` only: a token bucket (429 with `Retry-After`),
/// latency, and a share of injected 5xx answers (`{"error":"server_error"}`).
///
/// ## State
/// With a state file the whole state (teams and their keys, apps, people, transfers, signing keys,
/// the clock offset, live tokens and codes) is loaded at start, written in the background after
/// every scenario change (a failure is logged), and written once more at ``stop()``.
///
/// ## In-process use
/// ```swift
/// let emulator = try await AppleEmulator.start()
/// let sender = try emulator.createTeam()
/// try emulator.createApp(clientID: "com.example.app", teamID: sender.teamID)
/// let users = try emulator.createUsers(clientID: "com.example.app", count: 3)
/// // … emulator.baseURL is http://127.0.0.1:<port>
/// await emulator.stop()
/// ```
public final class AppleEmulator: Sendable {
    private let emulator: Emulator
    private let server: HTTPServer
    /// The routes the server answers with, also for ``respond(to:)``.
    private let router: Router
    /// The port the emulator listens on.
    public let port: Int
    /// `http://HOST:PORT`, the value for Baton's `apple.base_url`.
    public let baseURL: URL

    private init(emulator: Emulator, server: HTTPServer, router: Router, host: String, port: Int) {
        self.emulator = emulator
        self.server = server
        self.router = router
        self.port = port
        self.baseURL = URL(string: "http://\(host.contains(":") ? "[\(host)]" : host):\(port)")!
    }

    /// Every route the emulator serves, with the line `baton emulator --help` and docs/emulator.md show for it.
    public static var routes: [EmulatorRoute] { Emulator.routes }

    /// The HTTP limits of an emulator started without others: the server's defaults, but request bodies up to
    /// 64 MiB, so a million user identifiers fit one `POST /emulator/users`.
    public static var httpConfiguration: HTTPServerConfiguration {
        var configuration = HTTPServerConfiguration()
        configuration.maxBodySize = 64 << 20
        return configuration
    }

    /// Starts an emulator on `host:port` (port 0: a free port).
    ///
    /// - Parameters:
    ///   - statePath: a JSON state file, loaded when it exists and written after each scenario change.
    ///   - configuration: HTTP limits (``httpConfiguration`` unless given).
    /// - Throws: ``EmulatorError`` `state_file`, or `HTTPServerError` when the port cannot be bound.
    public static func start(
        host: String = "127.0.0.1",
        port: Int = 0,
        statePath: String? = nil,
        configuration: HTTPServerConfiguration = AppleEmulator.httpConfiguration,
        logger: Logger = .disabled()
    ) async throws -> AppleEmulator {
        let emulator = try await offPool { () throws(EmulatorError) in try Emulator(statePath: statePath, logger: logger) }
        let router = emulator.router()
        let server = HTTPServer(router: router, configuration: configuration, logger: logger)
        let bound = try await server.start(host: host, port: port)
        try await emulator.flush()
        return AppleEmulator(emulator: emulator, server: server, router: router, host: host, port: bound)
    }

    /// Answers `request` with the routes the server answers with (Apple's endpoints with their faults and
    /// statistics, the device and control endpoints), without a socket: for a client in the same process whose
    /// traffic to Apple is not what it rehearses (`baton rehearse`'s jobs, two million requests at a million users).
    /// The request is read as the server reads it: method, path, query, headers and body.
    public func respond(to request: HTTPRequest) async -> HTTPResponse {
        await router.respond(to: request)
    }

    /// Stops the server (letting in-flight requests finish) and writes the state file.
    public func stop() async {
        await server.stop()
        do { try await emulator.flush() } catch { emulator.logger.error("cannot save emulator state", ["error": error.description]) }
    }

    /// The emulator's clock.
    public var now: Date { emulator.now }

    /// Registers a team (a random 10-character ID when nil) with a new ES256 key.
    /// - Returns: the team ID, key ID and PKCS#8 PEM of the private key (as Apple's `.p8`).
    /// - Throws: ``EmulatorError`` `bad_input` (ID format), `conflict` (team exists).
    @discardableResult
    public func createTeam(_ teamID: String? = nil) throws(EmulatorError) -> TeamCredentials {
        let team = try emulator.createTeam(teamID)
        return TeamCredentials(teamID: team.teamID, keyID: team.keyID, privateKeyPEM: team.privateKeyPEM)
    }

    /// Registers an app (client ID) owned by `teamID`.
    /// - Throws: ``EmulatorError`` `unknown_team`, `conflict`, `bad_input`.
    public func createApp(clientID: String, teamID: String) throws(EmulatorError) {
        try emulator.createApp(clientID: clientID, teamID: teamID)
    }

    /// Creates `count` people who use `clientID` under its current team.
    ///
    /// - Parameter privateEmail: whether they hide their address behind a relay; nil alternates,
    ///   starting with a private one.
    /// - Throws: ``EmulatorError`` `unknown_app`, `bad_input`.
    public func createUsers(clientID: String, count: Int, privateEmail: Bool? = nil) throws(EmulatorError) -> [EmulatedUser] {
        try emulator.createUsers(clientID: clientID, count: count, privateEmail: privateEmail)
    }

    /// Creates one person per entry of `userIdentifiers`, known to `clientID`'s current team by that identifier
    /// (a fresh one where nil): a team seeds its real subjects this way. Each given identifier is 1 to 255
    /// characters, unique in the call and not already an identifier of anyone. With `transferIdentifiers`
    /// (empty, or one entry per person), person `i` also has `transferIdentifiers[i]` (where not nil) as their
    /// transfer identifier for `toTeamID`, as if the current team had generated it: a recipient's rehearsal
    /// seeds the transfer identifiers its table holds this way.
    /// - Throws: ``EmulatorError`` `unknown_app`, `unknown_team` (`toTeamID` missing, unknown or the owner),
    ///   `bad_input` (none, too many, or counts that differ; a user identifier empty, too long, repeated or already
    ///   in use, named in the reason; a transfer identifier repeated), `conflict` (a transfer identifier already in use).
    public func createUsers(clientID: String, userIdentifiers: [String?], transferIdentifiers: [String?] = [], toTeamID: String? = nil,
                            privateEmail: Bool? = nil) throws(EmulatorError) -> [EmulatedUser] {
        try emulator.createUsers(clientID: clientID, count: userIdentifiers.count, privateEmail: privateEmail, userIdentifiers: userIdentifiers,
                                 transferIdentifiers: transferIdentifiers.isEmpty ? nil : transferIdentifiers, transferTarget: toTeamID)
    }

    /// Makes every Apple-shaped identifier (`NNNNNN.<32 hex>.NNNN`) a user of `clientID` under its current team,
    /// without storing them: a rehearsal's copy holds millions of subjects. Each has a transfer identifier for
    /// `toTeamID`, deterministic, collision-free and Apple-shaped, that the recipient's exchange leads back to; any
    /// other transfer identifier (1 to 256 printable characters) is a user known to the recipient only, named
    /// ``cohortUser(transferIdentifier:)`` for ``authorize(clientID:user:nonce:issueCode:)``. Their identifiers
    /// under other teams and their addresses are derived, revocations kept. ``transferIdentifiers(clientID:)`` and
    /// the state file's people do not list them.
    /// - Throws: ``EmulatorError`` `unknown_app`, `unknown_team` (`toTeamID` unknown or the owner), `conflict` (one exists).
    public func createCohort(clientID: String, toTeamID: String) throws(EmulatorError) {
        try emulator.createCohort(clientID: clientID, toTeamID: toTeamID)
    }

    /// The `user` that names the cohort's member known by `transferIdentifier` (``createCohort(clientID:toTeamID:)``).
    public static func cohortUser(transferIdentifier: String) -> String { Cohort.personPrefix + transferIdentifier }

    /// Initiates the transfer of `clientID` to `toTeamID` (App Store Connect's "Transfer App").
    /// - Throws: ``EmulatorError`` `unknown_app`, `unknown_team`, `conflict` (same team, or one pending).
    public func initiateTransfer(clientID: String, toTeamID: String) throws(EmulatorError) {
        try emulator.initiateTransfer(clientID: clientID, toTeamID: toTeamID)
    }

    /// The recipient accepts the pending transfer: the app changes team now, and the 60-day window opens.
    /// - Returns: the acceptance time (emulator clock).
    /// - Throws: ``EmulatorError`` `unknown_app`, `conflict` (nothing pending).
    @discardableResult
    public func acceptTransfer(clientID: String) throws(EmulatorError) -> Date {
        try emulator.acceptTransfer(clientID: clientID)
    }

    /// The user behind `userIdentifier` revokes `clientID` (Settings › Sign in with Apple › Stop using).
    /// - Throws: ``EmulatorError`` `unknown_app`, `unknown_user`.
    public func revoke(clientID: String, userIdentifier: String) throws(EmulatorError) {
        try emulator.revoke(clientID: clientID, userIdentifier: userIdentifier)
    }

    /// Moves the emulator's clock by `seconds` (negative goes back); returns the new time.
    @discardableResult
    public func advanceClock(by seconds: Double) throws(EmulatorError) -> Date { try emulator.advanceClock(by: seconds) }

    /// Sets the emulator's clock.
    @discardableResult
    public func setClock(to date: Date) throws(EmulatorError) -> Date { try emulator.setClock(to: date) }

    /// Adds a new signing key, which signs from now on; returns its kid. The two previous keys stay published.
    @discardableResult
    public func rotateKeys() async throws(EmulatorError) -> String { try await emulator.rotateKeys() }

    /// The published key set, as `GET /auth/keys` serves it.
    public var jwks: JWKSet { emulator.jwks }

    /// Sets the faults for `/auth/*`.
    /// - Throws: ``EmulatorError`` `bad_input` for out-of-range values.
    public func setFaults(_ faults: EmulatorFaults) throws(EmulatorError) {
        try faults.validate()
        emulator.faults.set(faults)
    }

    /// Calls, answers and rate-limited requests per endpoint since start (or the last reset).
    public func stats() -> EmulatorStats { emulator.faults.snapshot() }

    /// Clears the statistics.
    public func resetStats() { emulator.faults.resetStats() }

    /// Signs in as a device would: `user` is a person's ID or any team-scoped identifier of theirs.
    ///
    /// With `issueCode` false no authorization code is made or kept (``Authorization/code`` is empty): for a
    /// device that only presents the identity token, such as the rehearsal's, whose million devices would
    /// otherwise leave a million unused codes (each holding its token) in the emulator's state. The token is the
    /// same but for `c_hash`, which only a token issued with a code carries. Default true.
    /// - Throws: ``EmulatorError`` `unknown_app`, `unknown_user`.
    public func authorize(clientID: String, user: String, nonce: String? = nil, issueCode: Bool = true) throws(EmulatorError) -> Authorization {
        try emulator.authorize(clientID: clientID, user: user, nonce: nonce, issueCode: issueCode)
    }

    /// What `getCredentialState(forUserID:)` answers on a device.
    public func credentialState(clientID: String, userIdentifier: String) -> CredentialState {
        emulator.credentialState(clientID: clientID, userIdentifier: userIdentifier)
    }

    /// Shortcut for tests: the sender-side transfer identifier of every current user of `clientID`
    /// (old `sub` → `transfer_sub`), generated as `/auth/usermigrationinfo` would for the
    /// transfer's recipient. The transfer must have been initiated.
    /// - Throws: ``EmulatorError`` `unknown_app`, `conflict` (no transfer), `invalid_client` (the window has closed).
    public func transferIdentifiers(clientID: String) throws(EmulatorError) -> [String: String] {
        try emulator.transferIdentifiers(clientID: clientID)
    }
}

/// A team's credentials as `POST /emulator/teams` returns them.
public struct TeamCredentials: Sendable, Equatable {
    /// The 10-character team ID (`iss` of its client secrets).
    public var teamID: String
    /// The 10-character key ID (`kid` of its client secrets).
    public var keyID: String
    /// The ES256 private key, PKCS#8 PEM (Apple's `.p8`).
    public var privateKeyPEM: String
}
