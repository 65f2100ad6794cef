import BatonConcurrency
import BatonLogging

/// An async request handler.
public typealias HTTPHandler = @Sendable (HTTPRequest) async throws -> HTTPResponse

/// What a loop handler is given besides its request: where it runs.
package struct HTTPRequestContext: Sendable {
    /// The event loop whose thread received the request, nil on one of libmicrohttpd's own threads. Work a handler
    /// starts on it (``NowOrLater/soon(_:)``: a statement on the loop's database pipeline, say) reports back on the
    /// same thread.
    package let loop: EventLoop?

    /// A context on `loop`.
    package init(loop: EventLoop?) {
        self.loop = loop
    }
}

/// A handler that runs on the thread that received the request: an event loop's, which serves many connections, or
/// one of libmicrohttpd's. It must not block that thread, ever: no libpq call that can wait, no connect, no file
/// read, no lock held across I/O. It answers at once with what it can compute (``NowOrLater/now(_:)``), starts work
/// on `context.loop` that answers in a later round of the loop (``NowOrLater/soon(_:)``), or hands the request to a
/// task (``NowOrLater/later(_:)``), where waiting is allowed. A route has one handler: in-process callers
/// (``Router/respond(to:logger:)``) run the same, with no loop in its context.
package typealias HTTPLoopHandler = @Sendable (HTTPRequest, HTTPRequestContext) throws -> NowOrLater<HTTPResponse>

/// Routes requests by method and exact path.
///
/// An unknown path answers 404 `not_found`; a known path with another method answers 405
/// `method_not_allowed` with an `Allow` header. `HEAD` is served by the `GET` route (the server
/// sends no body). A route has one handler, of either shape: an async ``HTTPHandler`` runs as the loop handler that
/// hands the request to a task. A handler's error becomes its response in one place, ``HTTPError/answering(_:)``:
/// an ``HTTPResponseError`` its own, any other error a 500 `internal_error` with no detail, logged at error level.
public struct Router: Sendable {
    private var routes: [String: [String: HTTPLoopHandler]] = [:]

    /// Creates a router with no routes.
    public init() {}

    /// Adds a route answered by `handler` on a task; a later route for the same method and path replaces the earlier
    /// one.
    public mutating func on(_ method: String, _ path: String, _ handler: @escaping HTTPHandler) {
        on(method, path, onLoop: { request, _ in .later { try await handler(request) } })
    }

    /// Adds a route whose requests are answered with `handler` on the thread that received them (see
    /// ``HTTPLoopHandler``: it never blocks, and may hand the request on as async work); in-process callers
    /// (``respond(to:logger:)``) run it with no loop in its context.
    package mutating func on(_ method: String, _ path: String, onLoop handler: @escaping HTTPLoopHandler) {
        routes[path, default: [:]][method.uppercased()] = handler
    }

    /// Adds a `GET` route.
    public mutating func get(_ path: String, _ handler: @escaping HTTPHandler) { on("GET", path, handler) }

    /// Adds a `POST` route.
    public mutating func post(_ path: String, _ handler: @escaping HTTPHandler) { on("POST", path, handler) }

    /// Every route, as method and path, sorted by path then method (`HEAD`, served by `GET`, is not listed):
    /// for documentation, and for the test that compares a service with its OpenAPI description.
    public var routeTable: [(method: String, path: String)] {
        routes.flatMap { path, byMethod in byMethod.keys.map { (method: $0, path: path) } }
            .sorted { ($0.path, $0.method) < ($1.path, $1.method) }
    }

    /// Answers `request` in process: runs the matching handler, with no event loop, to its response. Never throws.
    public func respond(to request: HTTPRequest, logger: Logger = .disabled()) async -> HTTPResponse {
        let answer = respondWithoutWaiting(to: request, context: HTTPRequestContext(loop: nil), logger: logger)
        do {
            return try await answer.value
        } catch {
            // Unreachable: the answer's errors are responses already.
            return Router.response(for: error, request, logger)
        }
    }

    /// Answers `request` on the thread that received it, without blocking it, through the route's handler; its
    /// errors, thrown at once or by the work it starts, become responses. Never throws.
    package func respondWithoutWaiting(to request: HTTPRequest, context: HTTPRequestContext, logger: Logger) -> NowOrLater<HTTPResponse> {
        let handler: HTTPLoopHandler
        switch route(request) {
        case .failure(let error): return .now(error.response)
        case .success(let found): handler = found
        }
        let settle = { @Sendable (outcome: Result<HTTPResponse, any Error>) -> HTTPResponse in
            switch outcome {
            case .success(let response): response
            case .failure(let error): Router.response(for: error, request, logger)
            }
        }
        do {
            return try handler(request, context).settled(settle)
        } catch {
            return .now(settle(.failure(error)))
        }
    }

    /// The handler for `request`, or the 404 or 405 to answer.
    private func route(_ request: HTTPRequest) -> Result<HTTPLoopHandler, HTTPError> {
        guard let byMethod = routes[request.path] else { return .failure(HTTPError.notFound) }
        guard let handler = byMethod[request.method] ?? (request.method == "HEAD" ? byMethod["GET"] : nil) else {
            return .failure(HTTPError.methodNotAllowed(request.method, allowed: byMethod.keys.sorted()))
        }
        return .success(handler)
    }

    /// A handler's error as its response (``HTTPError/answering(_:)``); one that is not an ``HTTPResponseError`` is logged.
    private static func response(for error: any Error, _ request: HTTPRequest, _ logger: Logger) -> HTTPResponse {
        if !(error is any HTTPResponseError) {
            logger.error("handler failed", ["method": request.method, "path": request.path, "error": String(describing: error)])
        }
        return HTTPError.answering(error).response
    }
}
