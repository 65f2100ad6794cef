import Baton
import BatonAppleSignIn
import BatonHTTPServer
import BatonJOSE
import BatonJSON

// The statuses `baton serve` answers each error code with: chosen here, where HTTP is served, once per code.

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

extension VerificationErrorCode: HTTPStatusCode {
    /// 503 for ``VerificationErrorCode/keysUnavailable`` (try later), 401 for a rejected token.
    public var httpStatus: Int { self == .keysUnavailable ? 503 : 401 }
}

extension JSONErrorCode: HTTPStatusCode {
    /// 400: every code is a refusal of the request's body.
    public var httpStatus: Int { 400 }
}

extension JOSEErrorCode: HTTPStatusCode {
    /// 500 for ``JOSEErrorCode/cryptoFailure`` (the server's own failure), 400 for every refusal of the input.
    public var httpStatus: Int { self == .cryptoFailure ? 500 : 400 }
}
