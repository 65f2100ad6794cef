import BatonErrors
import BatonJSON

/// An error that chooses its own HTTP answer: a status, a stable `error` code and a reason, written as
/// `{"error": code, "reason": reason}` (JSON) plus ``headers``.
///
/// A handler that throws one is answered with it (``Router``); any other error becomes a 500
/// `{"error":"internal_error"}` that reveals nothing about its cause. A ``CodedError`` is one when the HTTP layer
/// serving it has given its code a status (``HTTPStatusCode``).
public protocol HTTPResponseError: Error {
    /// The HTTP status code, e.g. 400.
    var status: Int { get }
    /// The body's `error` member: a stable, machine-readable code, e.g. `invalid_request`.
    var errorCode: String { get }
    /// The body's `reason` member: a short explanation that must not carry secrets, tokens or emails.
    var reason: String { get }
    /// Extra response headers (none by default).
    var headers: HTTPHeaders { get }
}

extension HTTPResponseError {
    /// No extra headers.
    public var headers: HTTPHeaders { [:] }

    /// The response this error is answered with.
    public var response: HTTPResponse {
        var response = HTTPResponse.json(["error": .string(errorCode), "reason": .string(reason)], status: status)
        for field in headers { response.headers.add(field.name, field.value) }
        return response
    }
}

/// An error code the HTTP layer answers: the status it is answered with, chosen where HTTP is served (the service,
/// the emulator), never by the module that throws the code.
public protocol HTTPStatusCode: ErrorCode {
    /// The HTTP status an error with this code is answered with (a 5xx for what the server, not the caller, must fix).
    var httpStatus: Int { get }
    /// Extra headers an error with this code is answered with, e.g. `WWW-Authenticate` on a 401 (none by default).
    var httpHeaders: HTTPHeaders { get }
}

extension HTTPStatusCode {
    /// No extra headers.
    public var httpHeaders: HTTPHeaders { [:] }
}

extension CodedError: HTTPResponseError where Codes: HTTPStatusCode {
    /// The code's ``HTTPStatusCode/httpStatus``.
    public var status: Int { code.httpStatus }
    /// The code's raw value.
    public var errorCode: String { code.rawValue }
    /// The code's ``HTTPStatusCode/httpHeaders``.
    public var headers: HTTPHeaders { code.httpHeaders }
}

/// The HTTP server's own answers (routing, limits, deadlines, a malformed form), their statuses chosen here: kept beside
/// ``CodedError`` because they come before any handler's code and carry headers that vary per request (`Allow`,
/// `Retry-After`). A handler may throw one to answer with a status and code chosen on the spot.
///
/// The response body is `{"error": code, "reason": reason}` (JSON); `headers` are added to the
/// response (for example `Retry-After` or `WWW-Authenticate`).
public struct HTTPError: HTTPResponseError, Sendable, Equatable, CustomStringConvertible {
    /// The HTTP status code, e.g. 400.
    public var status: Int
    /// A stable, machine-readable code, e.g. `invalid_request`.
    public var code: String
    /// A short human-readable explanation; must not carry secrets, tokens or emails.
    public var reason: String
    /// Extra response headers.
    public var headers: HTTPHeaders

    /// Creates an error answered with `status` and body `{"error": code, "reason": reason}`.
    public init(_ status: Int, code: String, reason: String, headers: HTTPHeaders = [:]) {
        self.status = status
        self.code = code
        self.reason = reason
        self.headers = headers
    }

    /// `status code: reason`.
    public var description: String { "\(status) \(code): \(reason)" }

    /// ``code``, the body's `error` member.
    public var errorCode: String { code }

    /// 400 `bad_request`.
    public static func badRequest(_ reason: String) -> HTTPError { HTTPError(400, code: "bad_request", reason: reason) }
    /// 400 `invalid_form`: the body is not a well-formed `application/x-www-form-urlencoded` form
    /// (``HTTPRequest/formValues()``).
    public static func invalidForm(_ reason: String) -> HTTPError { HTTPError(400, code: "invalid_form", reason: reason) }
    /// 404 `not_found`.
    public static let notFound = HTTPError(404, code: "not_found", reason: "no such route")
    /// 405 `method_not_allowed` with `Allow`: the path is served, but not for `method`.
    public static func methodNotAllowed(_ method: String, allowed: [String]) -> HTTPError {
        HTTPError(405, code: "method_not_allowed", reason: "\(method) is not allowed here", headers: ["Allow": allowed.joined(separator: ", ")])
    }
    /// 413 `payload_too_large`.
    public static func payloadTooLarge(limit: Int) -> HTTPError {
        HTTPError(413, code: "payload_too_large", reason: "request body exceeds \(limit) bytes")
    }
    /// 431 `request_head_too_large`: the request line and headers exceed `limit` bytes
    /// (``HTTPServerConfiguration/maxHeaderSize``).
    public static func requestHeadTooLarge(limit: Int) -> HTTPError {
        HTTPError(431, code: "request_head_too_large", reason: "the request line and headers exceed \(limit) bytes")
    }
    /// 503 `too_many_connections` with `Retry-After: 1`: the client's address already holds `limit` connections
    /// (``HTTPServerConfiguration/connectionsPerAddress``).
    public static func tooManyConnections(limit: Int) -> HTTPError {
        HTTPError(503, code: "too_many_connections", reason: "this address already holds \(limit) connections; reuse one or retry later",
                  headers: ["Retry-After": "1"])
    }
    /// 503 `timeout`: the handler did not answer within `limit` (``HTTPServerConfiguration/handlerTimeout``).
    public static func timeout(after limit: Duration) -> HTTPError {
        let milliseconds = limit.components.seconds * 1000 + limit.components.attoseconds / 1_000_000_000_000_000
        return HTTPError(503, code: "timeout", reason: "the request was not answered within \(milliseconds) ms", headers: ["Retry-After": "1"])
    }
    /// What answers a handler's `error`, the one rule for every route: the error itself when it is an
    /// ``HTTPResponseError``, else ``internalError`` (which reveals nothing of it). ``Router`` answers with it, and a
    /// route's middleware reads the status and code it will be answered with.
    package static func answering(_ error: any Error) -> any HTTPResponseError {
        error as? any HTTPResponseError ?? internalError
    }

    /// 500 `internal_error`, the answer for any unexpected failure.
    public static let internalError = HTTPError(500, code: "internal_error", reason: "internal server error")

    /// 503 `shutting_down` with `Retry-After: 1`: a request that arrived while the server stops.
    public static let shuttingDown = HTTPError(503, code: "shutting_down", reason: "the server is stopping", headers: ["Retry-After": "1"])
}
