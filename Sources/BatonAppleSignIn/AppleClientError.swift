import Foundation

/// Which of Apple's calls failed, and with whose credentials: enough to explain an error, nothing secret.
public struct AppleCallContext: Sendable, Equatable, CustomStringConvertible {
    /// The call.
    public enum Operation: String, Sendable, Equatable {
        /// `POST /auth/token` (client credentials, scope `user.migration`).
        case accessToken = "token"
        /// `POST /auth/usermigrationinfo` with `sub` and `target`: the sending team creates a transfer identifier.
        case transferIdentifier = "transfer identifier (sender side)"
        /// `POST /auth/usermigrationinfo` with `transfer_sub`: the receiving team exchanges a transfer identifier.
        case exchange = "exchange (recipient side)"
    }

    /// The call that failed.
    public var operation: Operation
    /// For an ``Operation/accessToken`` call made on the way to another call, that call (its side decides
    /// what the explanation asks for).
    public var purpose: Operation?
    /// The team whose key signed the client secret.
    public var teamID: String
    /// The key that signed the client secret.
    public var keyID: String
    /// The `client_id` sent (the secret's `sub`).
    public var clientID: String

    /// Creates a context.
    public init(operation: Operation, purpose: Operation? = nil, teamID: String, keyID: String, clientID: String) {
        self.operation = operation
        self.purpose = purpose
        self.teamID = teamID
        self.keyID = keyID
        self.clientID = clientID
    }

    /// `token for com.example.app with team AAAAAAAAAA's key KEYA000001`, and `(before the exchange (recipient
    /// side))` when the token was requested for another call.
    public var description: String {
        let before = purpose.map { " (before the \($0.rawValue))" } ?? ""
        return "\(operation.rawValue)\(before) for \(clientID) with team \(teamID)'s key \(keyID)"
    }
}

/// An error from the client secret or from a call to Apple: a stable code, the HTTP status and Apple's `error`
/// value when there was one, and the call's context.
///
/// `description` is one line; ``explanation`` says what to check, in order. Neither ever contains a client
/// secret, an access token, key material or a user identifier. Kept beside `CodedError`: the status, Apple's
/// `error`, `Retry-After`, the attempts and the call's context are what the bulk jobs' retry policy and the operator's
/// explanation read, and a code cannot carry them.
public struct AppleClientError: Error, Equatable, CustomStringConvertible {
    /// What went wrong.
    public enum Code: String, Sendable, Equatable {
        /// The `.p8` file cannot be read.
        case keyUnreadable = "key_unreadable"
        /// The key is not an EC P-256 PKCS#8 private key.
        case keyInvalid = "key_invalid"
        /// The `.p8` file is readable or writable by its group or others; refused until it is `chmod 600`.
        case keyExposed = "key_exposed"
        /// A team ID, key ID, client ID or lifetime given to ``ClientSecret``, or an argument of a call, is
        /// malformed (found before anything is sent).
        case invalidParameter = "invalid_parameter"
        /// Apple: `invalid_request` (a parameter is missing or malformed).
        case invalidRequest = "invalid_request"
        /// Apple: `invalid_client` (the client secret or client ID is not accepted).
        case invalidClient = "invalid_client"
        /// Apple: `invalid_grant` (the access token or transfer identifier is expired, revoked or not this app's).
        case invalidGrant = "invalid_grant"
        /// Apple: `unauthorized_client` (the app may not use this grant or scope).
        case unauthorizedClient = "unauthorized_client"
        /// Apple: `unsupported_grant_type`.
        case unsupportedGrantType = "unsupported_grant_type"
        /// Apple: `invalid_scope`.
        case invalidScope = "invalid_scope"
        /// Apple answered with another `error` value (kept in ``AppleClientError/appleError``).
        case otherAppleError = "other_apple_error"
        /// HTTP 429 on every attempt, or a `Retry-After` longer than the client waits.
        case rateLimited = "rate_limited"
        /// HTTP 5xx on every attempt.
        case serverError = "server_error"
        /// Another HTTP status without an `error` value.
        case unexpectedStatus = "unexpected_status"
        /// A 200 answer that is not the expected JSON.
        case invalidResponse = "invalid_response"
        /// The request timed out on every attempt.
        case timeout
        /// Apple could not be reached on every attempt.
        case connectionFailed = "connection_failed"
    }

    /// The stable code.
    public let code: Code
    /// The call and credentials, when the error comes from a call.
    public let context: AppleCallContext?
    /// The HTTP status, when Apple answered.
    public let status: Int?
    /// Apple's `error` value, when it sent one (a short ASCII code, checked before being kept).
    public let appleError: String?
    /// The `Retry-After` Apple asked for, in seconds, for ``Code/rateLimited``.
    public let retryAfter: TimeInterval?
    /// How many attempts were made.
    public let attempts: Int
    /// Why, in words, when there is more to say than the code: holds no secret (a file path, an OpenSSL
    /// reason, a transport error).
    public let reason: String?

    /// Creates an error.
    public init(
        _ code: Code,
        context: AppleCallContext? = nil,
        status: Int? = nil,
        appleError: String? = nil,
        retryAfter: TimeInterval? = nil,
        attempts: Int = 0,
        reason: String? = nil
    ) {
        self.code = code
        self.context = context
        self.status = status
        self.appleError = appleError
        self.retryAfter = retryAfter
        self.attempts = attempts
        self.reason = reason
    }

    /// Equality over the code, the operation, the status and Apple's error value.
    public static func == (lhs: AppleClientError, rhs: AppleClientError) -> Bool {
        lhs.code == rhs.code && lhs.context?.operation == rhs.context?.operation && lhs.status == rhs.status && lhs.appleError == rhs.appleError
    }

    /// What an error says about its cause, for a caller that tries again (the bulk jobs decide with it alone).
    public enum Cause: Sendable, Equatable {
        /// Apple is out of reach or failing for now: no connection, no answer in time, HTTP 5xx or 429. It passes,
        /// and neither the user nor the configuration is at fault: wait, then ask again.
        case outage
        /// Apple answered with something this client does not understand (another status, a malformed body): it
        /// may pass, but when it repeats the base URL is wrong.
        case unexpectedAnswer
        /// Apple refused the call for its user (`invalid_request`, `invalid_grant`): that user's case, or a shared
        /// cause (a wrong target team, the wrong app) when user after user is refused alike.
        case refused
        /// The key, the credentials or an argument are refused (`invalid_client`, `unauthorized_client`, …): no
        /// call succeeds until the configuration is fixed.
        case configuration
    }

    /// The cause ``code`` points at.
    public var cause: Cause {
        switch code {
        case .connectionFailed, .timeout, .serverError, .rateLimited: .outage
        case .unexpectedStatus, .invalidResponse: .unexpectedAnswer
        case .invalidRequest, .invalidGrant: .refused
        case .invalidClient, .unauthorizedClient, .unsupportedGrantType, .invalidScope, .otherAppleError, .invalidParameter, .keyInvalid,
             .keyUnreadable, .keyExposed: .configuration
        }
    }

    /// The code for Apple's `error` value.
    static func code(forAppleError value: String) -> Code {
        switch value {
        case "invalid_request": .invalidRequest
        case "invalid_client": .invalidClient
        case "invalid_grant": .invalidGrant
        case "unauthorized_client": .unauthorizedClient
        case "unsupported_grant_type": .unsupportedGrantType
        case "invalid_scope": .invalidScope
        default: .otherAppleError
        }
    }

    /// Whether `value` is safe to keep and show: 1 to 64 characters of `[a-z0-9_.-]` (Apple's codes are
    /// snake_case; anything else might be reflected input).
    static func isPlausibleAppleError(_ value: String) -> Bool {
        (1...64).contains(value.utf8.count) && value.utf8.allSatisfy { byte in
            (0x61...0x7A).contains(byte) || (0x41...0x5A).contains(byte) || (0x30...0x39).contains(byte) || byte == 0x5F || byte == 0x2E || byte == 0x2D
        }
    }

    /// One line: `Apple rejected the exchange (recipient side) for com.example.app with team BBBBBBBBBB's key
    /// KEYB000001: invalid_client (HTTP 400)`.
    public var description: String {
        var line: String
        switch code {
        case .keyUnreadable: line = "cannot read the private key"
        case .keyInvalid: line = "the private key is not an EC P-256 PKCS#8 key (an Apple .p8 file)"
        case .keyExposed: line = "the private key file is readable by its group or others"
        case .invalidParameter: line = "invalid parameter\(context.map { " for the \($0.operation.rawValue)" } ?? "")"
        case .rateLimited: line = "Apple rate-limited the \(context?.operation.rawValue ?? "call")"
        case .serverError: line = "Apple failed the \(context?.operation.rawValue ?? "call")"
        case .timeout: line = "Apple did not answer the \(context?.operation.rawValue ?? "call") in time"
        case .connectionFailed: line = "cannot reach Apple for the \(context?.operation.rawValue ?? "call")"
        case .invalidResponse: line = "Apple's answer to the \(context?.operation.rawValue ?? "call") is not what was expected"
        case .unexpectedStatus: line = "Apple answered the \(context?.operation.rawValue ?? "call") with an unexpected status"
        case .invalidRequest, .invalidClient, .invalidGrant, .unauthorizedClient, .unsupportedGrantType, .invalidScope, .otherAppleError:
            line = "Apple rejected the \(context?.description ?? "call"): \(appleError ?? code.rawValue)"
        }
        if let reason { line += " (\(reason))" }
        var facts: [String] = []
        if let status { facts.append("HTTP \(status)") }
        if let retryAfter { facts.append("Retry-After \(Int(retryAfter.rounded(.up))) s") }
        if attempts > 1 { facts.append("\(attempts) attempts") }
        if !facts.isEmpty { line += " [\(facts.joined(separator: ", "))]" }
        return line
    }

    /// What to check, most likely cause first, one cause per line.
    public var explanation: String {
        let side = context.map { $0.purpose ?? $0.operation }
        let team = context.map { "team \($0.teamID)'s key \($0.keyID)" } ?? "the key used"
        let client = context?.clientID ?? "the client ID"
        switch code {
        case .invalidClient:
            var causes: [String] = []
            switch side {
            case .exchange:
                causes.append("The app is not transferred yet: the recipient team must accept the transfer in App Store Connect before it can exchange transfer identifiers.")
                causes.append("The credentials are the wrong side's: exchanges need the recipient team's key and team ID (this call used \(team)).")
            case .transferIdentifier:
                causes.append("The app is no longer this team's: the sending team creates transfer identifiers from the moment it owns the app, before initiating the transfer, until 60 days after the recipient accepted it.")
                causes.append("The credentials are the wrong side's: transfer identifiers need the sender team's key and team ID (this call used \(team)).")
            case .accessToken, nil:
                causes.append("The app is not transferred yet (for recipient calls) or no longer the team's, 60 days after acceptance (for sender calls): the app must belong to the team whose key signs the secret.")
                causes.append("The credentials are the wrong side's: the sender's for sender calls, the recipient's for exchanges (this call used \(team)).")
            }
            causes.append("The client ID includes the team ID: send '\(AppleIdentifierFormat.strippingTeamPrefix(client))', not 'TEAMID.\(AppleIdentifierFormat.strippingTeamPrefix(client))'.")
            causes.append("The key belongs to a team other than the app's: the key ID and team ID must be from the developer account that owns \(client).")
            causes.append("The secret expired or is not yet valid: secrets live at most 6 months; check the machine's clock and make a new one.")
            return numbered(causes)
        case .invalidGrant:
            var causes = ["The access token expired, was revoked or was issued to another client ID: the client renews it once, so a repeat means the token request itself is wrong (check the client ID)."]
            switch side {
            case .exchange: causes.append("The transfer identifier was not made for this recipient team or this app.")
            case .transferIdentifier: causes.append("The user identifier is not one of this team's users for this app.")
            case .accessToken, nil: causes = ["The grant is not accepted: check grant_type 'client_credentials' and scope 'user.migration'."]
            }
            return numbered(causes)
        case .invalidRequest:
            switch side {
            case .exchange:
                return numbered([
                    "The 60-day window after the transfer was accepted has closed: Apple no longer exchanges transfer identifiers (check apple.transfer.accepted_at).",
                    "The transfer identifier is unknown, or was made for another recipient team (the sender must pass your team ID as target).",
                    "The user revoked the app's access.",
                ])
            case .transferIdentifier:
                return numbered([
                    "The target is not the team ID of the transfer's recipient (once a transfer is initiated, only its recipient; before, any other team).",
                    "The user identifier is not one of this team's users for this app.",
                    "The user revoked the app's access, or the 60-day window has closed.",
                ])
            case .accessToken, nil:
                return numbered(["A parameter is missing or malformed: check the client ID and the client secret."])
            }
        case .unauthorizedClient:
            return numbered(["The app is not allowed to use user migration: check that Sign in with Apple is enabled for \(client) under this team."])
        case .unsupportedGrantType, .invalidScope:
            return numbered(["The token request is malformed: grant_type must be 'client_credentials' and scope 'user.migration'."])
        case .otherAppleError, .unexpectedStatus, .invalidResponse:
            return numbered(["Apple's answer was not one this client knows: check the base URL (it must be https://appleid.apple.com or the emulator's)."])
        case .rateLimited:
            return numbered(["Apple limits the request rate: lower --rate or --workers and try again later\(retryAfter.map { " (Apple asked for \(Int($0.rounded(.up))) s)" } ?? "")."])
        case .serverError:
            return numbered(["Apple is failing: retry later; the bulk jobs resume where they stopped."])
        case .timeout, .connectionFailed:
            return numbered(["Check the network path and proxy to the base URL, and the base URL itself."])
        case .keyUnreadable:
            return numbered(["Check the path and the file's permissions (the .p8 file should be readable by this user only)."])
        case .keyExposed:
            return numbered(["Make the .p8 file private to the user Baton runs as: chmod 600 on the file named by private_key_path."])
        case .keyInvalid:
            return numbered(["Use the .p8 file downloaded from Certificates, Identifiers & Profiles > Keys (Sign in with Apple); it starts with '-----BEGIN PRIVATE KEY-----'."])
        case .invalidParameter:
            return numbered(["Team IDs are 10 upper-case letters or digits, key IDs 10 characters; the client ID is the bundle or Services ID without the team prefix; a secret's lifetime is at most 15,777,000 s (182 days); a transfer's target is the recipient's team ID."])
        }
    }

    private func numbered(_ lines: [String]) -> String {
        lines.enumerated().map { "\($0.offset + 1). \($0.element)" }.joined(separator: "\n")
    }
}
