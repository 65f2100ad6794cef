import BatonErrors

/// Why the HTTP API refused a request before the engine saw it: its shape (body, media type, a field) or its bearer
/// token. The engine's own refusals are ``BatonError``s; the statuses of both are chosen in `ErrorStatuses.swift`.
package typealias RequestError = CodedError<RequestErrorCode>

/// What was wrong with the request; the raw value is the answer's `error` member.
package enum RequestErrorCode: String, ErrorCode, CaseIterable {
    /// A required field is absent or empty.
    case missingField = "missing_field"
    /// The body is not a JSON object, or a member has the wrong type.
    case invalidJSON = "invalid_json"
    /// The `Content-Type` is not one the route takes.
    case unsupportedMediaType = "unsupported_media_type"
    /// The route needs a bearer token (admin or service) and none valid was given.
    case unauthorized
    /// The route is disabled: admin routes without a configured admin token.
    case forbidden
}
