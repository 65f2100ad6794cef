import Foundation
import BatonHTTPServer
import BatonJSON

/// One route of the emulator: what it answers, and the line `baton emulator --help` and docs/emulator.md show for it.
public struct EmulatorRoute: Sendable {
    /// How a route is wrapped (``Emulator/router()``).
    enum Kind {
        /// One of Apple's endpoints: faults, Apple's `{"error"}` answers, statistics.
        case apple
        /// A device or control endpoint: `{"error", "reason"}` answers, statistics.
        case control
        /// A control endpoint left out of the statistics (the statistics' own).
        case uncounted
    }

    /// `GET` or `POST`.
    public let method: String
    /// The path, e.g. `/emulator/users`.
    public let path: String
    /// One line: what it does, its body or query, its answer.
    public let summary: String
    let kind: Kind
    let handler: @Sendable (Emulator, HTTPRequest) async throws -> HTTPResponse

    init(_ method: String, _ path: String, _ kind: Kind, _ summary: String,
         _ handler: @escaping @Sendable (Emulator, HTTPRequest) async throws -> HTTPResponse) {
        (self.method, self.path, self.kind, self.summary, self.handler) = (method, path, kind, summary, handler)
    }
}

/// The emulator's HTTP routes: Apple's endpoints, the simulated device, and scenario control.
extension Emulator {
    /// Every route, in the order the help lists them.
    static let routes: [EmulatorRoute] = [
        EmulatorRoute("GET", "/auth/keys", .apple, "Apple's RS256 key set (JWKS) that signs identity tokens") { emulator, _ in
            HTTPResponse.json(bytes: emulator.jwksBody)
        },
        EmulatorRoute("POST", "/auth/token", .apple,
                      "Apple's, form: client_credentials with scope user.migration -> access_token") { emulator, request in
            try emulator.token(request)
        },
        EmulatorRoute("POST", "/auth/usermigrationinfo", .apple,
                      "Apple's, form and bearer: sub, target -> transfer_sub; transfer_sub -> sub, email") { emulator, request in
            try emulator.userMigrationInfo(request)
        },
        EmulatorRoute("POST", "/emulator/teams", .control, "create a team: {team_id?} -> team_id, key_id, private_key_pem (its .p8)") { emulator, request in
            let body = try JSONBody(request, allowEmpty: true)
            let team = try emulator.createTeam(try body.optionalString("team_id"))
            return reply(["team_id": .string(team.teamID), "key_id": .string(team.keyID), "private_key_pem": .string(team.privateKeyPEM)], status: 201)
        },
        EmulatorRoute("POST", "/emulator/apps", .control, "create an app owned by a team: {client_id, team_id}") { emulator, request in
            let body = try JSONBody(request)
            let clientID = try body.string("client_id"), teamID = try body.string("team_id")
            try emulator.createApp(clientID: clientID, teamID: teamID)
            return reply(["client_id": .string(clientID), "team_id": .string(teamID)], status: 201)
        },
        EmulatorRoute("POST", "/emulator/users", .control,
                      "create users: {client_id, count or user_identifiers, private_email?} -> users") { emulator, request in
            let body = try JSONBody(request)
            let clientID = try body.string("client_id"), privateEmail = try body.optionalBool("private_email")
            let hasCount = body.object["count"].map { $0 != .null } ?? false
            let users: [EmulatedUser]
            switch (hasCount, try body.optionalStrings("user_identifiers")) {
            case (true, nil):
                users = try emulator.createUsers(clientID: clientID, count: try body.int("count"), privateEmail: privateEmail)
            case (false, let given?):
                guard (1...EmulatorState.maxUsersPerCall).contains(given.count) else {
                    throw EmulatorError(.badInput, "user_identifiers must hold 1 to \(EmulatorState.maxUsersPerCall) identifiers")
                }
                users = try emulator.createUsers(clientID: clientID, count: given.count, privateEmail: privateEmail, userIdentifiers: given)
            case (true, _?): throw EmulatorError(.badInput, "give count or user_identifiers, not both")
            case (false, nil): throw EmulatorError(.badInput, "give count or user_identifiers")
            }
            return reply(["users": .array(users.map { user in
                .object(["id": .string(user.id), "user_identifier": .string(user.userIdentifier), "email": .string(user.email), "is_private_email": .bool(user.isPrivateEmail)])
            })], status: 201)
        },
        EmulatorRoute("POST", "/emulator/transfers", .control, "initiate the app's transfer: {client_id, to_team_id}") { emulator, request in
            let body = try JSONBody(request)
            let clientID = try body.string("client_id"), toTeamID = try body.string("to_team_id")
            try emulator.initiateTransfer(clientID: clientID, toTeamID: toTeamID)
            return reply(["client_id": .string(clientID), "to_team_id": .string(toTeamID), "state": "initiated"], status: 201)
        },
        EmulatorRoute("POST", "/emulator/transfers/accept", .control,
                      "the recipient accepts: {client_id} -> accepted_at (ISO 8601), accepted_at_unix") { emulator, request in
            let body = try JSONBody(request)
            let clientID = try body.string("client_id")
            let accepted = try emulator.acceptTransfer(clientID: clientID)
            return reply(["client_id": .string(clientID), "state": "accepted", "accepted_at": .string(accepted.formatted(.iso8601)),
                          "accepted_at_unix": .number(accepted.timeIntervalSince1970.rounded(.down))])
        },
        EmulatorRoute("GET", "/emulator/transfer-identifiers", .control,
                      "?client_id=: every user's transfer_sub, as the sender gets it") { emulator, request in
            guard let clientID = request.query["client_id"] else { throw EmulatorError(.badInput, "client_id is required") }
            // Encoded from the dictionary (keys sorted): a JSONObject built member by member searches its members on
            // each insertion, which is quadratic in a large table's users.
            return try HTTPResponse.json(encoding: ["transfer_subs": try emulator.transferIdentifiers(clientID: clientID)])
        },
        EmulatorRoute("POST", "/emulator/authorize", .control,
                      "a device signs in: {client_id, user, nonce?} -> id_token (nonce claim = nonce sent)") { emulator, request in
            let body = try JSONBody(request)
            let authorization = try emulator.authorize(clientID: try body.string("client_id"), user: try body.string("user"), nonce: try body.optionalString("nonce"))
            return reply(["id_token": .string(authorization.idToken), "code": .string(authorization.code), "user_identifier": .string(authorization.userIdentifier)])
        },
        EmulatorRoute("GET", "/emulator/credential-state", .control,
                      "?client_id=&user_identifier=: getCredentialState on a device -> state") { emulator, request in
            guard let clientID = request.query["client_id"], let identifier = request.query["user_identifier"] else {
                throw EmulatorError(.badInput, "client_id and user_identifier are required")
            }
            return reply(["state": .string(emulator.credentialState(clientID: clientID, userIdentifier: identifier).rawValue)])
        },
        EmulatorRoute("POST", "/emulator/revoke", .control, "a user stops using the app: {client_id, user_identifier}") { emulator, request in
            let body = try JSONBody(request)
            try emulator.revoke(clientID: try body.string("client_id"), userIdentifier: try body.string("user_identifier"))
            return reply(["state": "revoked"])
        },
        EmulatorRoute("GET", "/emulator/clock", .control, "the emulator's clock -> now (Unix seconds), iso") { emulator, _ in clockResponse(emulator.now) },
        EmulatorRoute("POST", "/emulator/clock", .control, "move the clock: {advance_seconds} or {now: Unix seconds or ISO 8601}") { emulator, request in
            let body = try JSONBody(request)
            if let seconds = try body.optionalDouble("advance_seconds") {
                return clockResponse(try emulator.advanceClock(by: seconds))
            }
            if case .number(let unix)? = body.object["now"] {
                return clockResponse(try emulator.setClock(to: Date(timeIntervalSince1970: unix)))
            }
            if case .string(let text)? = body.object["now"] {
                guard let date = try? Date(text, strategy: .iso8601) else { throw EmulatorError(.badInput, "now must be Unix seconds or ISO 8601") }
                return clockResponse(try emulator.setClock(to: date))
            }
            throw EmulatorError(.badInput, "give advance_seconds or now")
        },
        EmulatorRoute("POST", "/emulator/rotate-keys", .control, "a new signing key; the two before it stay published -> kid, published") { emulator, _ in
            let kid = try await emulator.rotateKeys()
            return reply(["kid": .string(kid), "published": .array(emulator.jwks.keys.compactMap { $0.kid }.map(JSONValue.string))])
        },
        EmulatorRoute("GET", "/emulator/faults", .control, "the faults applied to /auth/*") { emulator, _ in
            try HTTPResponse.json(encoding: emulator.faults.faults)
        },
        EmulatorRoute("POST", "/emulator/faults", .control,
                      "set them: {rate_limit_per_s?, latency_ms?, error_rate?, error_status?}") { emulator, request in
            let faults: EmulatorFaults
            do { faults = try JSONDecoder().decode(EmulatorFaults.self, from: Data(request.body)) } catch {
                throw EmulatorError(.badInput, "faults must be a JSON object of rate_limit_per_s, latency_ms, error_rate, error_status")
            }
            try faults.validate()
            emulator.faults.set(faults)
            return try HTTPResponse.json(encoding: faults)
        },
        EmulatorRoute("GET", "/emulator/stats", .uncounted, "calls, statuses, errors and rate-limited calls per route") { emulator, _ in
            try HTTPResponse.json(encoding: emulator.faults.snapshot())
        },
        EmulatorRoute("POST", "/emulator/stats/reset", .uncounted, "clear the statistics") { emulator, _ in
            emulator.faults.resetStats()
            return reply(["reset": true])
        },
    ]

    /// Builds the router from ``routes``.
    func router() -> Router {
        var router = Router()
        for route in Emulator.routes {
            switch route.kind {
            case .apple: router.on(route.method, route.path, apple(route.path, route.handler))
            case .control: router.on(route.method, route.path, control(route.path, route.handler))
            case .uncounted: router.on(route.method, route.path, control(nil, route.handler))
            }
        }
        return router
    }

    // MARK: - Wrappers: faults and statistics

    /// Wraps one of Apple's endpoints: the rate limit, latency, injected 5xx, and statistics, which see every answer and
    /// every thrown error. A refusal (``EmulatorError``) is answered in Apple's form (``EmulatorError/appleAnswer``);
    /// any other error is counted as the router will answer it and passed on.
    private func apple(_ path: String, _ handler: @escaping @Sendable (Emulator, HTTPRequest) async throws -> HTTPResponse) -> HTTPHandler {
        { [self] request in
            if let retryAfter = faults.admit() {
                return recorded(path, AppleFault.rateLimited(retryAfter: retryAfter), error: AppleFault.rateLimitedCode, rateLimited: true)
            }
            let latency = faults.faults.latencyMilliseconds
            if latency > 0 { try await Task.sleep(for: .milliseconds(latency)) }
            if let status = faults.injectError() {
                return recorded(path, AppleFault.serverError(status: status), error: AppleFault.serverErrorCode)
            }
            do {
                return recorded(path, try await handler(self, request), error: nil)
            } catch let error as EmulatorError {
                logger.debug("apple endpoint refused", ["path": path, "error": error.description])
                return recorded(path, error.appleAnswer, error: error.errorCode)
            } catch {
                record(path, error)
                throw error
            }
        }
    }

    /// Wraps a device or control endpoint: statistics (unless `path` is nil) see its answer or the error it threw, which
    /// passes on to the router (an ``EmulatorError`` is answered `{"error", "reason"}` with its code's status).
    private func control(_ path: String?, _ handler: @escaping @Sendable (Emulator, HTTPRequest) async throws -> HTTPResponse) -> HTTPHandler {
        { [self] request in
            do {
                let response = try await handler(self, request)
                if let path { faults.record(path: path, status: response.status, error: nil, rateLimited: false) }
                return response
            } catch {
                if let path { record(path, error) }
                throw error
            }
        }
    }

    /// Counts `response` for `path` and returns it.
    private func recorded(_ path: String, _ response: HTTPResponse, error: String?, rateLimited: Bool = false) -> HTTPResponse {
        faults.record(path: path, status: response.status, error: error, rateLimited: rateLimited)
        return response
    }

    /// Counts a thrown `error` for `path` with the status and code the router answers it with.
    private func record(_ path: String, _ error: any Error) {
        let answer = HTTPError.answering(error)
        faults.record(path: path, status: answer.status, error: answer.errorCode, rateLimited: false)
    }

    // MARK: - /auth/token and /auth/usermigrationinfo

    private func form(_ request: HTTPRequest) throws(EmulatorError) -> [String: String] {
        guard request.mediaType == "application/x-www-form-urlencoded" else {
            throw EmulatorError(.invalidRequest, "the body must be application/x-www-form-urlencoded")
        }
        do { return try request.formValues() } catch { throw EmulatorError(.invalidRequest, "malformed form body") }
    }

    private func token(_ request: HTTPRequest) throws(EmulatorError) -> HTTPResponse {
        let form = try form(request)
        guard let grantType = form["grant_type"], !grantType.isEmpty else { throw EmulatorError(.invalidRequest, "grant_type missing") }
        guard ["client_credentials", "authorization_code", "refresh_token"].contains(grantType) else {
            throw EmulatorError(.unsupportedGrantType, "grant_type \(grantType)")
        }
        if grantType == "client_credentials" {
            guard let scope = form["scope"], !scope.isEmpty else { throw EmulatorError(.invalidRequest, "scope missing") }
            guard scope == "user.migration" else { throw EmulatorError(.invalidScope, "scope must be user.migration") }
        }
        guard let clientID = form["client_id"], !clientID.isEmpty, let secret = form["client_secret"], !secret.isEmpty else {
            throw EmulatorError(.invalidRequest, "client_id and client_secret are required")
        }
        let now = self.now
        let teamID = try authenticate(clientSecret: secret, clientID: clientID, now: now)
        var body: JSONObject
        switch grantType {
        case "client_credentials":
            let token = try issueAccessToken(clientID: clientID, teamID: teamID, now: now)
            body = ["access_token": .string(token), "token_type": "Bearer", "expires_in": .number(EmulatorState.accessTokenLifetime)]
        case "authorization_code":
            guard let code = form["code"], !code.isEmpty else { throw EmulatorError(.invalidRequest, "code missing") }
            let redeemed = try redeem(code: code, clientID: clientID, teamID: teamID, now: now)
            body = ["access_token": .string(redeemed.accessToken), "token_type": "Bearer", "expires_in": .number(EmulatorState.accessTokenLifetime),
                    "refresh_token": .string(redeemed.refreshToken), "id_token": .string(redeemed.idToken)]
        default:
            guard let refreshToken = form["refresh_token"], !refreshToken.isEmpty else { throw EmulatorError(.invalidRequest, "refresh_token missing") }
            let refreshed = try refresh(token: refreshToken, clientID: clientID, teamID: teamID, now: now)
            body = ["access_token": .string(refreshed.accessToken), "token_type": "Bearer", "expires_in": .number(EmulatorState.accessTokenLifetime),
                    "id_token": .string(refreshed.idToken)]
        }
        return reply(body).noStore()
    }

    private func userMigrationInfo(_ request: HTTPRequest) throws(EmulatorError) -> HTTPResponse {
        let form = try form(request)
        guard let clientID = form["client_id"], !clientID.isEmpty, let secret = form["client_secret"], !secret.isEmpty else {
            throw EmulatorError(.invalidRequest, "client_id and client_secret are required")
        }
        let sub = form["sub"], target = form["target"], transferSub = form["transfer_sub"]
        let sender = sub != nil || target != nil
        guard sender ? (transferSub == nil && !(sub ?? "").isEmpty && !(target ?? "").isEmpty) : !(transferSub ?? "").isEmpty else {
            throw EmulatorError(.invalidRequest, "give sub and target, or transfer_sub")
        }
        guard let authorization = request.headers["Authorization"], authorization.hasPrefix("Bearer "),
              case let token = String(authorization.dropFirst(7)), !token.isEmpty else {
            throw EmulatorError(.invalidRequest, "Authorization: Bearer required")
        }
        let now = self.now
        let teamID = try authenticate(clientSecret: secret, clientID: clientID, now: now)
        try checkTeamActs(for: clientID, teamID: teamID, now: now)
        try checkAccessToken(token, clientID: clientID, teamID: teamID, now: now)
        if sender {
            let value = try senderTransferIdentifier(clientID: clientID, teamID: teamID, sub: sub!, target: target!, now: now)
            return reply(["transfer_sub": .string(value)]).noStore()
        }
        let identity = try exchange(clientID: clientID, teamID: teamID, transferSub: transferSub!, now: now)
        var body: JSONObject = ["sub": .string(identity.sub)]
        if let email = identity.email { body["email"] = .string(email) }
        body["is_private_email"] = .bool(identity.isPrivate)
        return reply(body).noStore()
    }
}

// MARK: - Small helpers

private func reply(_ object: JSONObject, status: Int = 200) -> HTTPResponse { HTTPResponse.json(.object(object), status: status) }

private func clockResponse(_ date: Date) -> HTTPResponse {
    reply(["now": .number(date.timeIntervalSince1970.rounded(.down)), "iso": .string(date.formatted(.iso8601))])
}

extension HTTPResponse {
    /// The response with one more header.
    func with(_ name: String, _ value: String) -> HTTPResponse {
        var copy = self
        copy.headers.add(name, value)
        return copy
    }

    /// The response with `Cache-Control: no-store` and `Pragma: no-cache`, as Apple's token answers carry.
    func noStore() -> HTTPResponse { with("Cache-Control", "no-store").with("Pragma", "no-cache") }
}

/// A JSON request body read strictly (JOSE's reader), with typed member access.
struct JSONBody {
    let object: JSONObject

    init(_ request: HTTPRequest, allowEmpty: Bool = false) throws(EmulatorError) {
        if allowEmpty && request.body.allSatisfy({ $0 == 0x20 || $0 == 0x0A || $0 == 0x0D || $0 == 0x09 }) {
            object = [:]
            return
        }
        do { object = try JSON.parseObject(request.body) } catch { throw EmulatorError(.badInput, "the body must be a JSON object") }
    }

    func string(_ name: String) throws(EmulatorError) -> String {
        guard let value = try optionalString(name), !value.isEmpty else { throw EmulatorError(.badInput, "\(name) is required") }
        return value
    }

    func optionalString(_ name: String) throws(EmulatorError) -> String? { try optional(name, \.stringValue, "a string") }

    func int(_ name: String) throws(EmulatorError) -> Int {
        guard let value = object[name]?.intValue, let int = Int(exactly: value) else { throw EmulatorError(.badInput, "\(name) must be a whole number") }
        return int
    }

    func optionalDouble(_ name: String) throws(EmulatorError) -> Double? { try optional(name, \.doubleValue, "a number") }

    func optionalBool(_ name: String) throws(EmulatorError) -> Bool? { try optional(name, \.boolValue, "true or false") }

    /// Member `name` as an array of strings; nil when absent or null.
    func optionalStrings(_ name: String) throws(EmulatorError) -> [String]? {
        guard let elements = try optional(name, \.arrayValue, "an array of strings") else { return nil }
        return try elements.enumerated().map { (index, element) throws(EmulatorError) -> String in
            guard let text = element.stringValue else { throw EmulatorError(.badInput, "\(name)[\(index)] must be a string") }
            return text
        }
    }

    /// Member `name` as `read` takes it; nil when absent or null, `bad_input` "`name` must be `kind`" for another value.
    private func optional<Value>(_ name: String, _ read: (JSONValue) -> Value?, _ kind: String) throws(EmulatorError) -> Value? {
        guard let member = object[name], member != .null else { return nil }
        guard let value = read(member) else { throw EmulatorError(.badInput, "\(name) must be \(kind)") }
        return value
    }
}

// MARK: - Statuses: the one place the emulator chooses the status of an error

extension EmulatorErrorCode: HTTPStatusCode {
    /// The status of a control endpoint's `{"error", "reason"}` answer: 404 for an unknown team, app or user,
    /// 409 for a conflict, 500 for the state file, else 400. Apple's endpoints answer ``EmulatorError/appleAnswer``.
    public var httpStatus: Int {
        switch self {
        case .unknownTeam, .unknownApp, .unknownUser: 404
        case .conflict: 409
        case .stateFile: 500
        case .invalidClient, .invalidRequest, .invalidGrant, .unsupportedGrantType, .invalidScope, .badInput: 400
        }
    }
}

extension EmulatorError {
    /// The answer of one of Apple's endpoints to this refusal, whatever its code: 400 with OAuth 2's `{"error": code}`
    /// (RFC 6749 section 5.2) and no reason, not to be cached, as Apple answers.
    var appleAnswer: HTTPResponse { reply(["error": .string(code.rawValue)], status: 400).noStore() }
}

/// The faults `POST /emulator/faults` injects into Apple's endpoints, answered as Apple does.
private enum AppleFault {
    /// The `error` of a rate-limited call.
    static let rateLimitedCode = "rate_limited"
    /// The `error` of an injected server error.
    static let serverErrorCode = "server_error"

    /// 429 with `Retry-After`: over the rate limit.
    static func rateLimited(retryAfter: Int) -> HTTPResponse {
        reply(["error": .string(rateLimitedCode)], status: 429).with("Retry-After", String(retryAfter))
    }

    /// The configured 5xx (`error_status`).
    static func serverError(status: Int) -> HTTPResponse { reply(["error": .string(serverErrorCode)], status: status) }
}
