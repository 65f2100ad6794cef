import Baton
import Foundation
import HTTPServer
import Logging

/// Baton's HTTP API over a ``BatonEngine``: the routes of `baton serve`, usable in-process too.
///
/// | route | answer |
/// | --- | --- |
/// | `POST /v1/signin` | `{"outcome", "user", "sub", "transfer_sub"?}` |
/// | `GET /v1/credential-state?user=ID` | `{"state"}` |
/// | `POST /v1/link` | `{"outcome", "user", "sub", "transfer_sub"?}` |
/// | `POST /v1/notifications` | `{"type", "changed"}` |
/// | `GET /v1/report` | transfer counts (admin token) |
/// | `GET /healthz`, `/readyz`, `/metrics` | liveness, readiness, Prometheus text |
///
/// Errors are `{"error": code, "reason": text}` with the status of ``BatonError/httpStatus``; bad input is
/// 4xx, an unreachable database 503. Each request logs one line (route, status, duration, outcome or
/// error), never tokens, secrets or emails.
public final class BatonService: Sendable {
    /// The engine.
    public let engine: BatonEngine
    /// The counters `/metrics` renders.
    public let metrics = ServiceMetrics()
    private let adminToken: AdminToken?
    private let logger: Logger

    /// Creates the service.
    /// - Parameters:
    ///   - engine: the library engine.
    ///   - adminToken: guards admin routes (`/v1/report`); nil disables them (403).
    ///   - logger: receives one line per request.
    public init(engine: BatonEngine, adminToken: AdminToken?, logger: Logger = .disabled()) {
        self.engine = engine
        self.adminToken = adminToken
        self.logger = logger
    }

    /// The routes, for an ``HTTPServer``.
    public func router() -> Router {
        var router = Router()
        router.post("/v1/signin", instrumented("signin", signIn))
        router.get("/v1/credential-state", instrumented("credential_state", credentialState))
        router.post("/v1/link", instrumented("link", link))
        router.post("/v1/notifications", instrumented("notifications", notification))
        router.get("/v1/report", instrumented("report", report))
        router.get("/healthz", instrumented("healthz") { _ in (HTTPResponse.json(serialized: #"{"status":"ok"}"#), nil) })
        router.get("/readyz", instrumented("readyz", readiness))
        router.get("/metrics", instrumented("metrics", renderMetrics))
        return router
    }

    // MARK: - Routes

    private struct SignInBody: Decodable {
        var id_token: String?
        var nonce: String?
    }

    private func signIn(_ request: HTTPRequest) async throws -> (HTTPResponse, String?) {
        let token: String
        let nonce: String?
        switch request.mediaType {
        case "application/json":
            let body = try decode(SignInBody.self, request)
            token = try required(body.id_token, "id_token")
            nonce = body.nonce
        case "application/x-www-form-urlencoded":
            // Apple's web form_post: id_token, code, state, user; Baton needs only the token.
            let form = try request.formValues()
            token = try required(form["id_token"], "id_token")
            nonce = form["nonce"]
        default:
            throw unsupportedMediaType(["application/json", "application/x-www-form-urlencoded"])
        }
        let result = try await engine.signIn(idToken: token, nonce: nonce)
        return (try HTTPResponse.json(SignInAnswer(result)), result.outcome.rawValue)
    }

    private func credentialState(_ request: HTTPRequest) async throws -> (HTTPResponse, String?) {
        let user = try required(request.query["user"], "user")
        let state = try await engine.credentialState(user: user)
        return (HTTPResponse.json(serialized: "{\"state\":\"\(state.rawValue)\"}"), state.rawValue)
    }

    private struct LinkBody: Decodable {
        var legacy_id_token: String?
        var id_token: String?
    }

    private func link(_ request: HTTPRequest) async throws -> (HTTPResponse, String?) {
        guard request.mediaType == "application/json" else { throw unsupportedMediaType(["application/json"]) }
        let body = try decode(LinkBody.self, request)
        let result = try await engine.link(legacyIDToken: try required(body.legacy_id_token, "legacy_id_token"),
                                           idToken: try required(body.id_token, "id_token"))
        return (try HTTPResponse.json(SignInAnswer(result)), result.outcome.rawValue)
    }

    private struct NotificationBody: Decodable {
        var payload: String?
    }

    private struct NotificationAnswer: Encodable {
        var type: String
        var changed: Bool
    }

    private func notification(_ request: HTTPRequest) async throws -> (HTTPResponse, String?) {
        guard request.mediaType == "application/json" else { throw unsupportedMediaType(["application/json"]) }
        let body = try decode(NotificationBody.self, request)
        let result = try await engine.handleNotification(payload: try required(body.payload, "payload"))
        return (try HTTPResponse.json(NotificationAnswer(type: result.type, changed: result.changed)), result.changed ? "changed" : "unchanged")
    }

    private func report(_ request: HTTPRequest) async throws -> (HTTPResponse, String?) {
        guard let adminToken else { throw HTTPError(403, code: "forbidden", reason: "admin routes are disabled: no admin token is configured") }
        let header = request.headers["Authorization"] ?? ""
        guard header.hasPrefix("Bearer "), adminToken.matches(header.dropFirst(7)) else {
            throw HTTPError(401, code: "unauthorized", reason: "a valid admin bearer token is required", headers: ["WWW-Authenticate": "Bearer"])
        }
        return (try HTTPResponse.json(try await engine.transferSummary()), nil)
    }

    private struct ReadinessAnswer: Encodable {
        var ready: Bool
        var database: Bool
        var keys: Bool
    }

    private func readiness(_ request: HTTPRequest) async throws -> (HTTPResponse, String?) {
        let state = await engine.readiness()
        let answer = ReadinessAnswer(ready: state.ready, database: state.database, keys: state.keys)
        return (try HTTPResponse.json(answer, status: state.ready ? 200 : 503), nil)
    }

    private func renderMetrics(_ request: HTTPRequest) async throws -> (HTTPResponse, String?) {
        let pool = await engine.poolUsage().map { (open: $0.open, idle: $0.idle, waiting: $0.waiting, max: $0.max) }
        return (HTTPResponse.text(metrics.render(pool: pool), contentType: "text/plain; version=0.0.4; charset=utf-8"), nil)
    }

    // MARK: - Plumbing

    /// Wraps a route: maps errors to `{"error","reason"}` answers, counts it, and logs one line.
    private func instrumented(_ route: String, _ handler: @escaping @Sendable (HTTPRequest) async throws -> (HTTPResponse, String?)) -> HTTPHandler {
        { [metrics, logger] request in
            let start = ContinuousClock.now
            var response: HTTPResponse
            var outcome: String?
            var rejection: String?
            do {
                (response, outcome) = try await handler(request)
            } catch let error as BatonError {
                response = HTTPError(error.httpStatus, code: error.code.rawValue, reason: error.reason).response
                rejection = error.code == .invalidToken || error.code == .invalidNotification ? error.reason : error.code.rawValue
            } catch let error as HTTPError {
                response = error.response
                rejection = error.code
            } catch {
                logger.error("request failed", ["route": route, "error": String(describing: error)])
                response = HTTPError.internalError.response
                rejection = HTTPError.internalError.code
            }
            let elapsed = ContinuousClock.now - start
            let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
            metrics.record(route: route, status: response.status, seconds: seconds, outcome: route == "signin" ? outcome : nil, rejection: rejection)
            var fields = ["route": route, "status": String(response.status), "duration_ms": String(format: "%.2f", seconds * 1000)]
            if let outcome { fields["outcome"] = outcome }
            if let rejection { fields["error"] = rejection }
            logger.info("request", fields)
            return response
        }
    }

    private func decode<T: Decodable>(_ type: T.Type, _ request: HTTPRequest) throws(HTTPError) -> T {
        try request.decodeJSON(T.self)
    }

    private func required(_ value: String?, _ name: String) throws(HTTPError) -> String {
        guard let value, !value.isEmpty else { throw HTTPError(400, code: "missing_field", reason: "\(name) is required") }
        return value
    }

    private func unsupportedMediaType(_ accepted: [String]) -> HTTPError {
        HTTPError(415, code: "unsupported_media_type", reason: "Content-Type must be \(accepted.joined(separator: " or "))")
    }
}

/// The JSON answer of a sign-in or a link.
struct SignInAnswer: Encodable {
    struct User: Encodable {
        var key: String
        var sub: String
        var email: String?
    }

    var outcome: String
    var user: User?
    var sub: String
    var transferSub: String?

    init(_ result: SignInResult) {
        outcome = result.outcome.rawValue
        user = result.user.map { User(key: $0.key, sub: $0.subject, email: $0.email) }
        sub = result.sub
        transferSub = result.transferSub
    }

    enum CodingKeys: String, CodingKey {
        case outcome, user, sub
        case transferSub = "transfer_sub"
    }

    func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(outcome, forKey: .outcome)
        try container.encode(user, forKey: .user)
        try container.encode(sub, forKey: .sub)
        try container.encodeIfPresent(transferSub, forKey: .transferSub)
    }
}
