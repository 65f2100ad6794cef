import Baton
import BatonConcurrency
import Foundation
import Synchronization
import BatonHTTPServer
import BatonAppleSignIn
import BatonJSON
import BatonLogging
import BatonReport

/// Baton's HTTP API over a ``BatonEngine``: the routes of `baton serve`, usable in-process too.
///
/// | route | answer |
/// | --- | --- |
/// | `POST /v1/signin` | `{"outcome", "user", "sub", "transfer_sub"?}` |
/// | `GET /v1/credential-state?user=ID` | `{"state"}` |
/// | `POST /v1/link/session` | `{"nonce", "expires_at", "expires_in"}` (201; service token when configured) |
/// | `POST /v1/link` | `{"outcome", "user", "sub", "transfer_sub"?}` |
/// | `POST /v1/notifications` | `{"type", "changed"}` |
/// | `GET /v1/report` | the correlation report as JSON (admin token) |
/// | `GET /report` | the same report as an HTML page (admin token) |
/// | `GET /healthz`, `/readyz`, `/metrics` | liveness, readiness, Prometheus text |
///
/// Errors are `{"error": code, "reason": text}`: the engine's (``BatonError``) and the request checks' (`RequestError`) with
/// the status `ErrorStatuses.swift` chooses for their code; bad input is 4xx, an unreachable database 503. Each request logs one line (route, status, duration, outcome or
/// error), never tokens, secrets or emails.
public final class BatonAPI: Sendable {
    /// The engine.
    public let engine: BatonEngine
    /// The counters `/metrics` renders.
    public let metrics = ServiceMetrics()
    private let adminToken: AdminToken?
    private let reportRefreshSeconds: Int
    private let serviceToken: AdminToken?
    private let logger: Logger
    private let readinessMonitor: ReadinessMonitor
    private let reportBuilder: (@Sendable (_ now: Date, _ acceptedAt: Date?) -> ReportBuilder)?
    /// The report being built, shared by the requests that arrive meanwhile: at most one report at a time holds a
    /// connection of the pool the sign-ins use (at ten million users a report reads for seconds).
    private let reportInFlight = Mutex<Task<MigrationReport, any Error>?>(nil)

    /// Creates the service.
    /// - Parameters:
    ///   - engine: the library engine.
    ///   - adminToken: guards admin routes (`/v1/report`); nil disables them (403).
    ///   - serviceToken: when given, `GET /v1/credential-state` and `POST /v1/link/session` require it as a bearer token.
    ///   - reportRefreshSeconds: how often the `GET /report` page reloads itself; 0 for never; default 300.
    ///   - reportBuilder: makes the report's builder for an instant and the transfer's acceptance time; nil disables
    ///     ``migrationReport()``.
    ///   - logger: receives one line per request.
    public init(engine: BatonEngine, adminToken: AdminToken?, serviceToken: AdminToken? = nil, reportRefreshSeconds: Int = 300,
                reportBuilder: (@Sendable (_ now: Date, _ acceptedAt: Date?) -> ReportBuilder)? = nil,
                logger: Logger = .disabled()) {
        self.engine = engine
        self.reportBuilder = reportBuilder
        self.adminToken = adminToken
        self.serviceToken = serviceToken
        self.reportRefreshSeconds = reportRefreshSeconds
        self.logger = logger
        readinessMonitor = ReadinessMonitor(engine: engine)
    }

    /// Stops the background readiness check (``BatonServer/stop()`` calls it).
    public func stopReadinessChecks() {
        readinessMonitor.stop()
    }

    /// The routes, for an ``HTTPServer``.
    public func router() -> Router {
        var router = Router()
        router.on("POST", "/v1/signin", onLoop: instrumented("signin", signIn))
        router.on("GET", "/v1/credential-state", onLoop: instrumented("credential_state", onTask(credentialState)))
        router.on("POST", "/v1/link/session", onLoop: instrumented("link_session", onTask(linkSession)))
        router.on("POST", "/v1/link", onLoop: instrumented("link", onTask(link)))
        router.on("POST", "/v1/notifications", onLoop: instrumented("notifications", onTask(notification)))
        router.on("GET", "/v1/report", onLoop: instrumented("report", onTask(report)))
        router.on("GET", "/report", onLoop: instrumented("report_page", onTask(reportPage)))
        router.on("GET", "/healthz", onLoop: instrumented("healthz", onTask { _ in (HTTPResponse.json(["status": "ok"]), nil) }))
        router.on("GET", "/readyz", onLoop: instrumented("readyz", onTask(readiness)))
        router.on("GET", "/metrics", onLoop: instrumented("metrics", onTask(renderMetrics)))
        return router
    }

    // MARK: - Routes

    /// `POST /v1/signin` on the thread that received it: on an event loop, the sign-in's statements go through the
    /// loop's pipeline; elsewhere, and for what the pipeline cannot do, on a task.
    private func signIn(_ request: HTTPRequest, _ context: HTTPRequestContext) throws -> NowOrLater<(HTTPResponse, String?)> {
        let (token, nonce) = try signInFields(request)
        return try engine.signIn(idToken: token, nonce: nonce, on: context.loop).map { [self] result in
            (signInAnswer(result), result.outcome.rawValue)
        }
    }

    /// The token and the expected nonce of a sign-in request (JSON, or Apple's web `form_post`).
    private func signInFields(_ request: HTTPRequest) throws -> (token: String, nonce: ExpectedNonce?) {
        let token: String
        let nonce: String?
        let flow: String?
        switch request.mediaType {
        case "application/json":
            let body = try jsonObject(request)
            token = try required(string(body, "id_token"), "id_token")
            nonce = try string(body, "nonce")
            flow = try string(body, "nonce_flow")
        case "application/x-www-form-urlencoded":
            // Apple's web form_post: id_token, code, state, user; Baton needs only the token (and the nonce).
            let form = try request.formValues()
            token = try required(form["id_token"], "id_token")
            nonce = form["nonce"]
            flow = form["nonce_flow"]
        default:
            throw unsupportedMediaType(["application/json", "application/x-www-form-urlencoded"])
        }
        return (token, try expectedNonce(nonce, flow: flow))
    }

    private func credentialState(_ request: HTTPRequest) async throws -> (HTTPResponse, String?) {
        if let serviceToken { try requireBearer(serviceToken, request, what: "service") }
        let user = try required(request.query["user"], "user")
        let state = try await engine.credentialState(user: user)
        return (HTTPResponse.json(["state": .string(state.rawValue)]), state.rawValue)
    }

    private func link(_ request: HTTPRequest) async throws -> (HTTPResponse, String?) {
        guard request.mediaType == "application/json" else { throw unsupportedMediaType(["application/json"]) }
        let body = try jsonObject(request)
        // Both tokens must carry the nonce of the caller's session: without one, a link is refused.
        guard let nonce = try expectedNonce(try string(body, "nonce"), flow: try string(body, "nonce_flow")) else {
            throw RequestError(.missingField, "nonce is required")
        }
        let result = try await engine.link(legacyIDToken: try required(string(body, "legacy_id_token"), "legacy_id_token"),
                                           idToken: try required(string(body, "id_token"), "id_token"), nonce: nonce)
        return (signInAnswer(result), result.outcome.rawValue)
    }

    /// `POST /v1/link/session`: a link session's nonce, for both ceremonies of one `POST /v1/link`. Each stores a row,
    /// so the service token guards it when one is configured, and the engine caps the live sessions.
    private func linkSession(_ request: HTTPRequest) async throws -> (HTTPResponse, String?) {
        if let serviceToken { try requireBearer(serviceToken, request, what: "service") }
        let session = try await engine.openLinkSession()
        let answer: JSONValue = [
            "expires_at": .string(ISO8601DateFormatter().string(from: session.expiresAt)),
            "expires_in": .number(max(0, session.expiresAt.timeIntervalSinceNow.rounded())),
            "nonce": .string(session.nonce),
        ]
        return (HTTPResponse.json(answer, status: 201), nil)
    }

    private func notification(_ request: HTTPRequest) async throws -> (HTTPResponse, String?) {
        guard request.mediaType == "application/json" else { throw unsupportedMediaType(["application/json"]) }
        let body = try jsonObject(request)
        let result = try await engine.handleNotification(payload: try required(string(body, "payload"), "payload"))
        return (HTTPResponse.json(["changed": .bool(result.changed), "type": .string(result.type)]), result.changed ? "changed" : "unchanged")
    }

    private func report(_ request: HTTPRequest) async throws -> (HTTPResponse, String?) {
        try requireAdmin(request)
        return (HTTPResponse.json(serialized: try await sharedReport().renderJSON()), nil)
    }

    /// `GET /report`: the same report as one self-contained HTML page (inline CSS and SVG, no scripts) that
    /// reloads itself every `reportRefreshSeconds` with a meta refresh.
    private func reportPage(_ request: HTTPRequest) async throws -> (HTTPResponse, String?) {
        try requireAdmin(request)
        let page = try await sharedReport().renderHTML(refreshSeconds: reportRefreshSeconds > 0 ? reportRefreshSeconds : nil)
        return (HTTPResponse.text(page, contentType: "text/html; charset=utf-8"), nil)
    }

    /// The report being built when one is, else a new one; the last request to finish with it clears it.
    private func sharedReport() async throws -> MigrationReport {
        let task = reportInFlight.withLock { inFlight in
            if let inFlight { return inFlight }
            let task = Task { try await self.migrationReport() }
            inFlight = task
            return task
        }
        defer { reportInFlight.withLock { if $0 == task { $0 = nil } } }
        return try await task.value
    }

    /// The correlation report (``MigrationReport``, rendered by `GET /v1/report`), with emails masked, at the engine's
    /// clock and transfer acceptance time.
    /// - Throws: ``BatonError`` `not_configured` when the service was built without a report source,
    ///   `database_unavailable`.
    public func migrationReport() async throws -> MigrationReport {
        guard let reportBuilder else { throw BatonError(.notConfigured, "no report source is configured") }
        return try await engine.database { try await reportBuilder(engine.now(), engine.transferAcceptedAt).build() }
    }

    /// Admin routes need `Authorization: Bearer <admin token>`, compared in constant time.
    private func requireAdmin(_ request: HTTPRequest) throws {
        guard let adminToken else { throw RequestError(.forbidden, "admin routes are disabled: no admin token is configured") }
        try requireBearer(adminToken, request, what: "admin")
    }

    /// Requires `Authorization: Bearer <token>`: the scheme in any case (RFC 9110), the token compared in
    /// constant time (``AdminToken/matches(_:)``).
    private func requireBearer(_ token: AdminToken, _ request: HTTPRequest, what: String) throws {
        let header = request.headers["Authorization"] ?? ""
        let parts = header.split(separator: " ", maxSplits: 1, omittingEmptySubsequences: true)
        guard parts.count == 2, parts[0].lowercased() == "bearer",
              token.matches(parts[1].trimmingCharacters(in: .whitespaces)) else {
            throw RequestError(.unauthorized, "a valid \(what) bearer token is required")
        }
    }

    /// The nonce to expect from a request's `nonce` and `nonce_flow` (`native`, the default, or `web`); nil
    /// without a nonce.
    private func expectedNonce(_ nonce: String?, flow: String?) throws(BatonError) -> ExpectedNonce? {
        guard let nonce, !nonce.isEmpty else { return nil }
        guard let parsed = ExpectedNonce.Flow(rawValue: flow ?? ExpectedNonce.Flow.native.rawValue) else {
            throw BatonError(.invalidRequest, "nonce_flow must be native or web")
        }
        return ExpectedNonce(nonce, flow: parsed)
    }

    private func readiness(_ request: HTTPRequest) async throws -> (HTTPResponse, String?) {
        // From the background check: a probe never takes a pool connection of its own.
        let state = await readinessMonitor.current()
        let answer: JSONValue = ["database": .bool(state.database), "keys": .bool(state.keys), "ready": .bool(state.ready)]
        return (HTTPResponse.json(answer, status: state.ready ? 200 : 503), nil)
    }

    private func renderMetrics(_ request: HTTPRequest) async throws -> (HTTPResponse, String?) {
        let pool = await engine.poolUsage().map { (open: $0.open, idle: $0.idle, waiting: $0.waiting, max: $0.max) }
        // /readyz's answer as a gauge, from the same background check (alerts/baton.rules.yml reads it).
        let state = await readinessMonitor.current()
        var text = metrics.render(pool: pool)
        text += "# HELP baton_ready Whether /readyz answers ready: 1 yes, 0 no; by check (database, keys) and for both (all).\n# TYPE baton_ready gauge\n"
        for (check, ok) in [("all", state.ready), ("database", state.database), ("keys", state.keys)] {
            text += "baton_ready{check=\"\(check)\"} \(ok ? 1 : 0)\n"
        }
        text += transferMetrics(counts: state.database ? await transferCounts() : nil, acceptedAt: engine.transferAcceptedAt)
        return (HTTPResponse.text(text, contentType: "text/plain; version=0.0.4; charset=utf-8"), nil)
    }

    /// The longest a scrape waits for the transfer's counts before leaving them out.
    private static let transferCountsTimeout: Duration = .seconds(2)

    /// The transfer's counts, or nil when they fail or take longer than ``transferCountsTimeout`` (a hung
    /// database leaves the scrape's other series on time; the query finishes on its own).
    private func transferCounts() async -> BatonEngine.TransferCounts? {
        let answer = Mutex<CheckedContinuation<BatonEngine.TransferCounts?, Never>?>(nil)
        return await withCheckedContinuation { continuation in
            answer.withLock { $0 = continuation }
            let finish: @Sendable (BatonEngine.TransferCounts?) -> Void = { counts in
                answer.withLock { pending in
                    pending?.resume(returning: counts)
                    pending = nil
                }
            }
            let timer = Task {
                guard (try? await Task.sleep(for: BatonAPI.transferCountsTimeout)) != nil else { return }
                finish(nil)
            }
            Task { [engine] in
                finish(try? await engine.transferCounts())
                timer.cancel()
            }
        }
    }

    /// The transfer's series: users by state and migrations by method (from the report's count tables; left out
    /// when the database does not answer), and the 60-day window's end (absent before `accepted_at`).
    private func transferMetrics(counts: BatonEngine.TransferCounts?, acceptedAt: Date?) -> String {
        var text = ""
        if let counts {
            text += "# HELP baton_transfer_users Users of the transfer (rows of baton.transfers) by state.\n# TYPE baton_transfer_users gauge\n"
            for (state, count) in counts.users.sorted(by: { $0.key < $1.key }) {
                text += "baton_transfer_users{state=\"\(state)\"} \(count)\n"
            }
            text += "# HELP baton_transfer_migrated_total Users migrated by method (sign-in, exchange, re-link), all replicas and jobs.\n# TYPE baton_transfer_migrated_total counter\n"
            for (method, count) in counts.migrated.sorted(by: { $0.key < $1.key }) {
                text += "baton_transfer_migrated_total{method=\"\(method)\"} \(count)\n"
            }
        }
        if let end = TransferWindow(acceptedAt: acceptedAt).closesAt {
            text += "# HELP baton_transfer_window_end_timestamp_seconds When the 60-day transfer window closes (apple.transfer.accepted_at + 60 days).\n# TYPE baton_transfer_window_end_timestamp_seconds gauge\n"
            text += "baton_transfer_window_end_timestamp_seconds \(Int(end.timeIntervalSince1970))\n"
        }
        return text
    }

    // MARK: - Plumbing

    /// A route's handler: its response and the outcome it counts (a sign-in's), now, soon on the loop, or later.
    private typealias Handler = @Sendable (HTTPRequest, HTTPRequestContext) throws -> NowOrLater<(HTTPResponse, String?)>

    /// An async route as a ``Handler`` that hands the request to a task.
    private func onTask(_ handler: @escaping @Sendable (HTTPRequest) async throws -> (HTTPResponse, String?)) -> Handler {
        { request, _ in .later { try await handler(request) } }
    }

    /// A route with its middleware: sees what the handler answered or threw (at once or from the work it started),
    /// counts it and logs one line, and passes it on; the router answers an error (``HTTPError/answering(_:)``).
    private func instrumented(_ route: String, _ handler: @escaping Handler) -> HTTPLoopHandler {
        { [self] request, context in
            let start = ContinuousClock.now
            let answer: NowOrLater<(HTTPResponse, String?)>
            do {
                answer = try handler(request, context)
            } catch {
                record(route, since: start, .failure(error))
                throw error
            }
            return try answer.settled { [self] outcome in
                record(route, since: start, outcome)
                return outcome
            }.map { try $0.get().0 }
        }
    }

    /// Counts a route's answer (`result`: its response and outcome, or the error it is answered with) and logs its line.
    private func record(_ route: String, since start: ContinuousClock.Instant, _ result: Result<(HTTPResponse, String?), any Error>) {
        let status: Int
        var outcome: String?
        var rejection: String?
        var tokenRejection: String?
        switch result {
        case .success(let (response, label)):
            status = response.status
            outcome = label
        case .failure(let error as BatonError) where error.code == .invalidToken || error.code == .invalidNotification:
            status = error.status
            rejection = error.reason  // the rejection's own code: `expired`, `bad_signature`, …
            tokenRejection = rejection
        case .failure(let error):
            let answer = HTTPError.answering(error)
            status = answer.status
            rejection = answer.errorCode
        }
        let elapsed = ContinuousClock.now - start
        let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
        // `baton_rejections_total` counts refused identity tokens and notifications only; any other refusal (a missing
        // admin token, a malformed body) shows in `baton_http_requests_total` by its status.
        metrics.record(route: route, status: status, seconds: seconds, outcome: route == "signin" ? outcome : nil, rejection: tokenRejection)
        // The line's fields are only built when the line is written: above info, a request logs nothing and costs nothing.
        if logger.level <= .info {
            var fields = ["route": route, "status": String(status), "duration_ms": BatonAPI.milliseconds(seconds)]
            if let outcome { fields["outcome"] = outcome }
            if let rejection { fields["error"] = rejection }
            logger.info("request", fields)
        }
    }

    /// `seconds` as milliseconds with two decimals (`0.25` → `250.00`), without Foundation's `String(format:)`,
    /// which cost more than the rest of the request's log line.
    static func milliseconds(_ seconds: Double) -> String {
        let hundredths = Int((max(0, seconds) * 100_000).rounded())
        let fraction = hundredths % 100
        return String(hundredths / 100) + (fraction < 10 ? ".0" : ".") + String(fraction)
    }

    /// The body as a JSON object (strict: no duplicate members).
    private func jsonObject(_ request: HTTPRequest) throws(RequestError) -> JSONObject {
        do {
            return try JSON.parseObject(request.body)
        } catch {
            throw RequestError(.invalidJSON, "request body is not a JSON object")
        }
    }

    /// Member `name` of `object` as a string; nil when absent or null.
    private func string(_ object: JSONObject, _ name: String) throws(RequestError) -> String? {
        guard let value = object[name], !value.isNull else { return nil }
        guard let text = value.stringValue else { throw RequestError(.invalidJSON, "\(name) must be a string") }
        return text
    }

    /// The JSON answer of a sign-in or a link: `{"outcome", "user": {"key", "sub", "email"?, "account_key"?} | null, "sub",
    /// "transfer_sub"?, "merged_from"?}`.
    private func signInAnswer(_ result: SignInResult) -> HTTPResponse {
        var object: JSONObject = ["outcome": .string(result.outcome.rawValue)]
        if let user = result.user {
            var userObject: JSONObject = ["key": .string(user.key), "sub": .string(user.subject)]
            if let email = user.email { userObject["email"] = .string(email) }
            if let accountKey = user.accountKey { userObject["account_key"] = .string(accountKey) }
            object["user"] = .object(userObject)
        } else {
            object["user"] = .null
        }
        object["sub"] = .string(result.sub)
        if let transferSub = result.transferSub { object["transfer_sub"] = .string(transferSub) }
        if let mergedFrom = result.mergedFrom { object["merged_from"] = .string(mergedFrom) }
        return HTTPResponse.json(.object(object))
    }

    private func required(_ value: String?, _ name: String) throws(RequestError) -> String {
        guard let value, !value.isEmpty else { throw RequestError(.missingField, "\(name) is required") }
        return value
    }

    private func unsupportedMediaType(_ accepted: [String]) -> RequestError {
        RequestError(.unsupportedMediaType, "Content-Type must be \(accepted.joined(separator: " or "))")
    }
}
