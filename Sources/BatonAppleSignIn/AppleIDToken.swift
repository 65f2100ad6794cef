import Foundation
import BatonJSON

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

    /// Every claim as sent, in order (for printing or for claims this type does not name).
    public let claims: JSONObject
    /// The `kid` of the key that signed the token.
    public let keyID: String
    /// Where each named claim sits in `claims`; the properties below read through it.
    private let fields: ClaimFields

    /// Checks the types of the optional claims (the required ones having been checked by the verifier).
    /// - Throws: ``VerificationError`` `.invalidClaim` for an optional claim of the wrong type or range.
    init(claims: JSONObject, fields: ClaimFields, keyID: String) throws {
        for name in [ClaimFields.Name.nonce, .email, .transferSub, .cHash, .atHash, .orgID] {
            if let value = fields[name], value.stringValue == nil {
                throw VerificationError(.invalidClaim, "'\(name.claim)' must be a string")
            }
        }
        for name in [ClaimFields.Name.nonceSupported, .emailVerified, .isPrivateEmail] {
            if let value = fields[name], Self.flag(value) == nil {
                throw VerificationError(.invalidClaim, "'\(name.claim)' must be a Boolean")
            }
        }
        if let value = fields[.realUserStatus], value.intValue.flatMap({ RealUserStatus(rawValue: Int($0)) }) == nil {
            throw VerificationError(.invalidClaim, "'real_user_status' must be 0, 1 or 2")
        }
        if let value = fields[.authTime], (value.doubleValue ?? -1) < 0 {
            throw VerificationError(.invalidClaim, "'auth_time' must be a non-negative NumericDate")
        }
        self.claims = claims
        self.fields = fields
        self.keyID = keyID
    }

    /// `iss`: the issuer (always `https://appleid.apple.com` once verified).
    public var issuer: String { fields[.iss]?.stringValue ?? "" }
    /// `sub`: the user's stable identifier for the team.
    public var subject: String { fields[.sub]?.stringValue ?? "" }
    /// `aud`: the audience (one or more client IDs); at least one is configured.
    public var audience: [String] {
        switch fields[.aud] {
        case .string(let single)?: return [single]
        case .array(let elements)?: return elements.compactMap(\.stringValue)
        default: return []
        }
    }
    /// `iat`: when the token was issued.
    public var issuedAt: Date { date(.iat) ?? Date(timeIntervalSince1970: 0) }
    /// `exp`: when the token expires.
    public var expiresAt: Date { date(.exp) ?? Date(timeIntervalSince1970: 0) }
    /// `nbf`: not valid before, when present.
    public var notBefore: Date? { date(.nbf) }
    /// `nonce`, when present (the SHA-256 hex of the app's raw nonce in the native flow).
    public var nonce: String? { fields[.nonce]?.stringValue }
    /// `nonce_supported`, when present.
    public var nonceSupported: Bool? { fields[.nonceSupported].flatMap(Self.flag) }
    /// `email`, when shared (possibly a private relay address). Mask it before logging.
    public var email: String? { fields[.email]?.stringValue }
    /// `email_verified`, when present.
    public var emailVerified: Bool? { fields[.emailVerified].flatMap(Self.flag) }
    /// `is_private_email`, when present.
    public var isPrivateEmail: Bool? { fields[.isPrivateEmail].flatMap(Self.flag) }
    /// `real_user_status`, when present.
    public var realUserStatus: RealUserStatus? { fields[.realUserStatus]?.intValue.flatMap { RealUserStatus(rawValue: Int($0)) } }
    /// `transfer_sub`: the transfer identifier, present during an app transfer's 60-day window.
    public var transferSubject: String? { fields[.transferSub]?.stringValue }
    /// `c_hash`, when present.
    public var codeHash: String? { fields[.cHash]?.stringValue }
    /// `at_hash`, when present.
    public var accessTokenHash: String? { fields[.atHash]?.stringValue }
    /// `auth_time`, when present.
    public var authTime: Date? { date(.authTime) }
    /// `org_id`, when present (Apple School and Business Manager accounts).
    public var organizationID: String? { fields[.orgID]?.stringValue }

    /// Tokens are equal when their claims and key IDs are.
    public static func == (lhs: AppleIDToken, rhs: AppleIDToken) -> Bool {
        lhs.claims == rhs.claims && lhs.keyID == rhs.keyID
    }

    private func date(_ name: ClaimFields.Name) -> Date? {
        fields[name]?.doubleValue.map { Date(timeIntervalSince1970: $0) }
    }

    /// A Boolean claim: `true`/`false`, or the strings `"true"`/`"false"` as Apple sometimes sends.
    private static func flag(_ value: JSONValue) -> Bool? {
        switch value {
        case .bool(let flag): return flag
        case .string("true"): return true
        case .string("false"): return false
        default: return nil
        }
    }
}

/// The claims Apple defines, located in a claims set in one pass (each member name is compared once);
/// values are read from the members only when needed, so nothing is copied up front.
struct ClaimFields: Sendable {
    private let members: [JSONObject.Member]
    private var positions = InlineArray<17, Int>(repeating: -1)

    /// The claims located (17 of them: the size of `positions`).
    enum Name: Int, CaseIterable {
        case iss, sub, aud, iat, exp, nbf, nonce, email, cHash, orgID, atHash, authTime
        case transferSub, emailVerified, nonceSupported, isPrivateEmail, realUserStatus

        /// The claim's name in the token.
        var claim: String {
            switch self {
            case .iss: "iss"
            case .sub: "sub"
            case .aud: "aud"
            case .iat: "iat"
            case .exp: "exp"
            case .nbf: "nbf"
            case .nonce: "nonce"
            case .email: "email"
            case .cHash: "c_hash"
            case .orgID: "org_id"
            case .atHash: "at_hash"
            case .authTime: "auth_time"
            case .transferSub: "transfer_sub"
            case .emailVerified: "email_verified"
            case .nonceSupported: "nonce_supported"
            case .isPrivateEmail: "is_private_email"
            case .realUserStatus: "real_user_status"
            }
        }
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
