import BatonLogging

/// An async request handler.
public typealias HTTPHandler = @Sendable (HTTPRequest) async throws -> HTTPResponse

/// Routes requests by method and exact path.
///
/// An unknown path answers 404 `not_found`; a known path with another method answers 405
/// `method_not_allowed` with an `Allow` header. `HEAD` is served by the `GET` route (the server
/// sends no body). A handler's ``HTTPError`` becomes its response; any other error a 500
/// `internal_error` with no detail, logged at error level.
public struct Router: Sendable {
    private var routes: [String: [String: HTTPHandler]] = [:]

    /// Creates a router with no routes.
    public init() {}

    /// Adds a route; a later route for the same method and path replaces the earlier one.
    public mutating func on(_ method: String, _ path: String, _ handler: @escaping HTTPHandler) {
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

    /// Answers `request`: runs the matching handler and maps errors to responses. Never throws.
    public func respond(to request: HTTPRequest, logger: Logger = .disabled()) async -> HTTPResponse {
        guard let byMethod = routes[request.path] else { return HTTPError.notFound.response }
        guard let handler = byMethod[request.method] ?? (request.method == "HEAD" ? byMethod["GET"] : nil) else {
            let allowed = byMethod.keys.sorted().joined(separator: ", ")
            return HTTPError(405, code: "method_not_allowed", reason: "\(request.method) is not allowed here",
                             headers: ["Allow": allowed]).response
        }
        do {
            return try await handler(request)
        } catch let error as HTTPError {
            return error.response
        } catch {
            logger.error("handler failed", ["method": request.method, "path": request.path, "error": String(describing: error)])
            return HTTPError.internalError.response
        }
    }
}
