import Foundation

// The JSON answers of Apple's REST endpoints, decoded with Codable: their shapes are known. Token and key
// set input goes through the strict reader instead (`BatonJOSE.JSON`).

/// `POST /auth/token`: the access token and its lifetime.
struct TokenAnswer: Decodable {
    let accessToken: String
    let expiresIn: Double
    let tokenType: String?

    enum CodingKeys: String, CodingKey {
        case accessToken = "access_token"
        case expiresIn = "expires_in"
        case tokenType = "token_type"
    }
}

/// `POST /auth/usermigrationinfo` on the sender side: the user's transfer identifier.
struct TransferIdentifierAnswer: Decodable {
    let transferSub: String

    enum CodingKeys: String, CodingKey {
        case transferSub = "transfer_sub"
    }
}

/// `POST /auth/usermigrationinfo` on the recipient side: the user's new identifier and email.
struct ExchangeAnswer: Decodable {
    let sub: String
    let email: String?
    let isPrivateEmail: Flag?

    enum CodingKeys: String, CodingKey {
        case sub, email
        case isPrivateEmail = "is_private_email"
    }

    /// A Boolean that Apple sends either as JSON `true`/`false` or as the string `"true"`/`"false"`.
    struct Flag: Decodable {
        let value: Bool

        init(from decoder: any Decoder) throws {
            let container = try decoder.singleValueContainer()
            if let flag = try? container.decode(Bool.self) {
                value = flag
            } else if let text = try? container.decode(String.self), text == "true" || text == "false" {
                value = text == "true"
            } else {
                throw DecodingError.dataCorruptedError(in: container, debugDescription: "not a boolean")
            }
        }
    }

    /// The reason an answer that does not decode is refused, naming the member at fault.
    static func problem(_ error: DecodingError) -> String {
        let path: [any CodingKey]
        switch error {
        case .typeMismatch(_, let context), .valueNotFound(_, let context), .dataCorrupted(let context): path = context.codingPath
        case .keyNotFound(let key, let context): path = context.codingPath + [key]
        @unknown default: path = []
        }
        switch path.first?.stringValue {
        case CodingKeys.email.rawValue: return "email is not a string"
        case CodingKeys.isPrivateEmail.rawValue: return "is_private_email is not a boolean"
        default: return "no sub"
        }
    }
}

/// An error answer: Apple's `error` code.
struct ErrorAnswer: Decodable {
    let error: String
}
