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
/// task (``NowOrLater/later(_:)``), where waiting is allowed.
package typealias HTTPLoopHandler = @Sendable (HTTPRequest, HTTPRequestContext) throws -> NowOrLater<HTTPResponse>

/// Routes requests by method and exact path.
///
/// An unknown path answers 404 `not_found`; a known path with another method answers 405
/// `method_not_allowed` with an `Allow` header. `HEAD` is served by the `GET` route (the server
/// sends no body). A handler's ``HTTPResponseError`` becomes its response; any other error a 500
/// `internal_error` with no detail, logged at error level.
public struct Router: Sendable {
    private var routes: [String: [String: Route]] = [:]

    private struct Route {
        var handler: HTTPHandler
        /// Answers on the thread that received the request when given; ``handler`` answers in-process callers
        /// (``respond(to:logger:)``).
        var onLoop: HTTPLoopHandler?
    }

    /// Creates a router with no routes.
    public init() {}

    /// Adds a route; a later route for the same method and path replaces the earlier one.
    public mutating func on(_ method: String, _ path: String, _ handler: @escaping HTTPHandler) {
        routes[path, default: [:]][method.uppercased()] = Route(handler: handler)
    }

    /// Adds a route whose requests the server answers on the thread that received them with `onLoop` (see
    /// ``HTTPLoopHandler``: it never blocks, and may hand the request on as async work); `handler` answers the same
    /// requests for ``respond(to:logger:)`` (in-process callers, on the cooperative pool). Both must answer alike.
    package mutating func on(_ method: String, _ path: String, onLoop: @escaping HTTPLoopHandler, _ handler: @escaping HTTPHandler) {
        routes[path, default: [:]][method.uppercased()] = Route(handler: handler, onLoop: onLoop)
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

    /// Answers `request`: runs the matching handler and maps errors to responses. Never throws.
    public func respond(to request: HTTPRequest, logger: Logger = .disabled()) async -> HTTPResponse {
        switch route(request) {
        case .failure(let error): return error.response
        case .success(let route):
            do {
                return try await route.handler(request)
            } catch {
                return Router.response(for: error, request, logger)
            }
        }
    }

    /// Answers `request` on the thread that received it, without blocking it: through the route's loop handler
    /// when it has one, else as async work that calls ``respond(to:logger:)``. Never throws.
    package func respondWithoutWaiting(to request: HTTPRequest, context: HTTPRequestContext, logger: Logger) -> NowOrLater<HTTPResponse> {
        switch route(request) {
        case .failure(let error): return .now(error.response)
        case .success(let route):
            guard let onLoop = route.onLoop else { return .later { await respond(to: request, logger: logger) } }
            do {
                return try onLoop(request, context).settled { outcome in
                    switch outcome {
                    case .success(let response): return response
                    case .failure(let error): return Router.response(for: error, request, logger)
                    }
                }
            } catch {
                return .now(Router.response(for: error, request, logger))
            }
        }
    }

    /// The route for `request`, or the 404 or 405 to answer.
    private func route(_ request: HTTPRequest) -> Result<Route, HTTPError> {
        guard let byMethod = routes[request.path] else { return .failure(HTTPError.notFound) }
        guard let route = byMethod[request.method] ?? (request.method == "HEAD" ? byMethod["GET"] : nil) else {
            let allowed = byMethod.keys.sorted().joined(separator: ", ")
            return .failure(HTTPError(405, code: "method_not_allowed", reason: "\(request.method) is not allowed here",
                                      headers: ["Allow": allowed]))
        }
        return .success(route)
    }

    /// A handler's ``HTTPResponseError`` as its response; anything else a 500, logged.
    private static func response(for error: any Error, _ request: HTTPRequest, _ logger: Logger) -> HTTPResponse {
        if let error = error as? any HTTPResponseError { return error.response }
        logger.error("handler failed", ["method": request.method, "path": request.path, "error": String(describing: error)])
        return HTTPError.internalError.response
    }
}
