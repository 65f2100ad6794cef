import Foundation
import JOSE

/// The claims of a verified Sign in with Apple identity token.
///
/// Built only by ``IdentityTokenVerifier`` after the signature and the required claims have been checked.
/// Optional claims keep Apple's meaning; `email_verified` and `is_private_email` arrive as Booleans or as
/// the strings `"true"`/`"false"`, and both decode.
public struct AppleIDToken: Sendable, Equatable {
    /// `real_user_status`: Apple's estimate of whether the user is a real person.
    public enum RealUserStatus: Int, Sendable {
        /// 0: not supported on this platform or software version.
        case unsupported = 0
        /// 1: the system could not tell.
        case unknown = 1
        /// 2: very likely a real person.
        case likelyReal = 2
    }

    /// `iss`: the issuer (always `https://appleid.apple.com` once verified).
    public let issuer: String
    /// `sub`: the user's stable identifier for the team.
    public let subject: String
    /// `aud`: the audience (one or more client IDs); at least one is configured.
    public let audience: [String]
    /// `iat`: when the token was issued.
    public let issuedAt: Date
    /// `exp`: when the token expires.
    public let expiresAt: Date
    /// `nbf`: not valid before, when present.
    public let notBefore: Date?
    /// `nonce`, when present (the SHA-256 hex of the app's raw nonce in the native flow).
    public let nonce: String?
    /// `nonce_supported`, when present.
    public let nonceSupported: Bool?
    /// `email`, when shared (possibly a private relay address). Mask it before logging.
    public let email: String?
    /// `email_verified`, when present.
    public let emailVerified: Bool?
    /// `is_private_email`, when present.
    public let isPrivateEmail: Bool?
    /// `real_user_status`, when present.
    public let realUserStatus: RealUserStatus?
    /// `transfer_sub`: the transfer identifier, present during an app transfer's 60-day window.
    public let transferSubject: String?
    /// `c_hash`, when present.
    public let codeHash: String?
    /// `at_hash`, when present.
    public let accessTokenHash: String?
    /// `auth_time`, when present.
    public let authTime: Date?
    /// `org_id`, when present (Apple School and Business Manager accounts).
    public let organizationID: String?
    /// The `kid` of the key that signed the token.
    public let keyID: String
    /// Every claim as sent, in order (for printing or for claims this type does not name).
    public let claims: JSONObject

    /// Decodes the optional claims of `claims`, the required ones being passed in already checked.
    init(claims: JSONObject, keyID: String, issuer: String, subject: String, audience: [String],
         issuedAt: Date, expiresAt: Date, notBefore: Date?) throws {
        self.claims = claims
        self.keyID = keyID
        self.issuer = issuer
        self.subject = subject
        self.audience = audience
        self.issuedAt = issuedAt
        self.expiresAt = expiresAt
        self.notBefore = notBefore
        var nonce: String?, nonceSupported: Bool?, email: String?, emailVerified: Bool?, isPrivateEmail: Bool?
        var realUserStatus: RealUserStatus?, transferSubject: String?, codeHash: String?, accessTokenHash: String?
        var authTime: Date?, organizationID: String?
        for member in claims {
            switch member.key {
            case "nonce": nonce = try Self.string(member)
            case "nonce_supported": nonceSupported = try Self.flag(member)
            case "email": email = try Self.string(member)
            case "email_verified": emailVerified = try Self.flag(member)
            case "is_private_email": isPrivateEmail = try Self.flag(member)
            case "real_user_status":
                guard let raw = member.value.intValue, let status = RealUserStatus(rawValue: Int(raw)) else {
                    throw VerificationError(.invalidClaim, "'real_user_status' must be 0, 1 or 2")
                }
                realUserStatus = status
            case "transfer_sub": transferSubject = try Self.string(member)
            case "c_hash": codeHash = try Self.string(member)
            case "at_hash": accessTokenHash = try Self.string(member)
            case "auth_time": authTime = try Self.date(member)
            case "org_id": organizationID = try Self.string(member)
            default: continue
            }
        }
        self.nonce = nonce
        self.nonceSupported = nonceSupported
        self.email = email
        self.emailVerified = emailVerified
        self.isPrivateEmail = isPrivateEmail
        self.realUserStatus = realUserStatus
        self.transferSubject = transferSubject
        self.codeHash = codeHash
        self.accessTokenHash = accessTokenHash
        self.authTime = authTime
        self.organizationID = organizationID
    }

    private static func string(_ member: JSONObject.Member) throws -> String {
        guard case .string(let value) = member.value else {
            throw VerificationError(.invalidClaim, "'\(member.key)' must be a string")
        }
        return value
    }

    /// A Boolean claim: `true`/`false`, or the strings `"true"`/`"false"` as Apple sometimes sends.
    private static func flag(_ member: JSONObject.Member) throws -> Bool {
        switch member.value {
        case .bool(let value): return value
        case .string("true"): return true
        case .string("false"): return false
        default: throw VerificationError(.invalidClaim, "'\(member.key)' must be a Boolean")
        }
    }

    private static func date(_ member: JSONObject.Member) throws -> Date {
        guard case .number(let seconds) = member.value, seconds >= 0 else {
            throw VerificationError(.invalidClaim, "'\(member.key)' must be a non-negative NumericDate")
        }
        return Date(timeIntervalSince1970: seconds)
    }
}
