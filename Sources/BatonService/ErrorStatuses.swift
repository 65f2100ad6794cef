import Baton
import BatonHTTPServer

// The statuses `baton serve` answers each error code with: chosen here, where HTTP is served, once per code, in
// switches that name every code (a new code does not compile until it has a status). The engine turns a rejected
// token into a `BatonError`, so the verification, JOSE and JSON codes are never answered and have no status.

extension BatonErrorCode: HTTPStatusCode {
    /// 401 for a refused token, 409 for a conflict, 404 for a missing legacy record, 400 for a bad request, 503 when
    /// the database, Apple's keys or a link session cannot be had (try later), 500 or 501 for what the operator must fix.
    public var httpStatus: Int {
        switch self {
        case .invalidToken, .nonceReused, .staleToken: 401
        case .conflict, .notLinkable: 409
        case .legacyRecordMissing: 404
        case .invalidNotification, .invalidRequest: 400
        case .databaseUnavailable, .keysUnavailable, .tooManyLinkSessions: 503
        case .invalidLegacyTable, .inconsistentDatabaseAnswer: 500
        case .notConfigured: 501
        }
    }
}

extension RequestErrorCode: HTTPStatusCode {
    /// 400 for a malformed request, 415 for its media type, 401 without a valid bearer token, 403 for a disabled route.
    package var httpStatus: Int {
        switch self {
        case .missingField, .invalidJSON: 400
        case .unsupportedMediaType: 415
        case .unauthorized: 401
        case .forbidden: 403
        }
    }

    /// `WWW-Authenticate: Bearer` on a 401 (RFC 6750); no extra header otherwise.
    package var httpHeaders: HTTPHeaders {
        switch self {
        case .unauthorized: ["WWW-Authenticate": "Bearer"]
        case .missingField, .invalidJSON, .unsupportedMediaType, .forbidden: [:]
        }
    }
}
