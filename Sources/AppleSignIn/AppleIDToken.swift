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

    /// Decodes the optional claims from `fields`, the required ones being passed in already checked.
    init(claims: JSONObject, fields: ClaimFields, keyID: String, issuer: String, subject: String, audience: [String],
         issuedAt: Date, expiresAt: Date, notBefore: Date?) throws {
        self.claims = claims
        self.keyID = keyID
        self.issuer = issuer
        self.subject = subject
        self.audience = audience
        self.issuedAt = issuedAt
        self.expiresAt = expiresAt
        self.notBefore = notBefore
        nonce = try Self.string(fields[.nonce], "nonce")
        nonceSupported = try Self.flag(fields[.nonceSupported], "nonce_supported")
        email = try Self.string(fields[.email], "email")
        emailVerified = try Self.flag(fields[.emailVerified], "email_verified")
        isPrivateEmail = try Self.flag(fields[.isPrivateEmail], "is_private_email")
        if let raw = fields[.realUserStatus] {
            guard let number = raw.intValue, let status = RealUserStatus(rawValue: Int(number)) else {
                throw VerificationError(.invalidClaim, "'real_user_status' must be 0, 1 or 2")
            }
            realUserStatus = status
        } else {
            realUserStatus = nil
        }
        transferSubject = try Self.string(fields[.transferSub], "transfer_sub")
        codeHash = try Self.string(fields[.cHash], "c_hash")
        accessTokenHash = try Self.string(fields[.atHash], "at_hash")
        organizationID = try Self.string(fields[.orgID], "org_id")
        if let raw = fields[.authTime] {
            guard case .number(let seconds) = raw, seconds >= 0 else {
                throw VerificationError(.invalidClaim, "'auth_time' must be a non-negative NumericDate")
            }
            authTime = Date(timeIntervalSince1970: seconds)
        } else {
            authTime = nil
        }
    }

    private static func string(_ value: JSONValue?, _ name: String) throws -> String? {
        guard let value else { return nil }
        guard case .string(let text) = value else { throw VerificationError(.invalidClaim, "'\(name)' must be a string") }
        return text
    }

    /// A Boolean claim: `true`/`false`, or the strings `"true"`/`"false"` as Apple sometimes sends.
    private static func flag(_ value: JSONValue?, _ name: String) throws -> Bool? {
        switch value {
        case nil: return nil
        case .bool(let flag)?: return flag
        case .string("true")?: return true
        case .string("false")?: return false
        default: throw VerificationError(.invalidClaim, "'\(name)' must be a Boolean")
        }
    }
}

/// The claims Apple defines, located in a claims set in one pass (each member name is compared once);
/// values are read from the members only when needed, so nothing is copied up front.
struct ClaimFields {
    private let members: [JSONObject.Member]
    private var positions = InlineArray<17, Int>(repeating: -1)

    /// The claims located (17 of them: the size of `positions`).
    enum Name: Int, CaseIterable {
        case iss, sub, aud, iat, exp, nbf, nonce, email, cHash, orgID, atHash, authTime
        case transferSub, emailVerified, nonceSupported, isPrivateEmail, realUserStatus
    }

    init(_ claims: JSONObject) {
        members = claims.members
        for position in members.indices {
            if let name = Self.name(of: members[position].key) { positions[name.rawValue] = position }
        }
    }

    /// The value of claim `name`, if present.
    subscript(name: Name) -> JSONValue? {
        let position = positions[name.rawValue]
        return position < 0 ? nil : members[position].value
    }

    private static func name(of key: String) -> Name? {
        switch key.utf8.count {
        case 3:
            switch key {
            case "iss": return .iss
            case "sub": return .sub
            case "aud": return .aud
            case "iat": return .iat
            case "exp": return .exp
            case "nbf": return .nbf
            default: return nil
            }
        case 5: return key == "nonce" ? .nonce : key == "email" ? .email : nil
        case 6: return key == "c_hash" ? .cHash : key == "org_id" ? .orgID : nil
        case 7: return key == "at_hash" ? .atHash : nil
        case 9: return key == "auth_time" ? .authTime : nil
        case 12: return key == "transfer_sub" ? .transferSub : nil
        case 14: return key == "email_verified" ? .emailVerified : nil
        case 15: return key == "nonce_supported" ? .nonceSupported : nil
        case 16: return key == "is_private_email" ? .isPrivateEmail : key == "real_user_status" ? .realUserStatus : nil
        default: return nil
        }
    }
}
