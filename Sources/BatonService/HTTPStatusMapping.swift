import Baton

extension BatonError.Code {
    /// The HTTP status ``BatonAPI`` answers with for this code: the domain error knows nothing of HTTP.
    var httpStatus: Int {
        switch self {
        case .invalidToken, .nonceReused, .staleToken: 401
        case .conflict, .notLinkable: 409
        case .legacyRecordMissing: 404
        case .invalidNotification, .invalidRequest: 400
        case .databaseUnavailable, .keysUnavailable: 503
        case .invalidLegacyTable, .inconsistentDatabaseAnswer: 500
        case .notConfigured: 501
        }
    }
}
