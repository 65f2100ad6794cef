import BatonErrors

/// Why the emulator refused a call: Apple's OAuth error codes for Apple's endpoints, and the
/// emulator's own codes for scenario control.
///
/// `description` carries the code and a short reason, never a token, secret or email.
public typealias EmulatorError = CodedError<EmulatorErrorCode>

/// Stable codes; the raw value is what the HTTP body's `error` member says.
public enum EmulatorErrorCode: String, ErrorCode, CaseIterable {
    /// Apple: the client could not be authenticated (bad client secret, wrong team, app not transferred).
    case invalidClient = "invalid_client"
    /// Apple: a parameter is missing or malformed, an unknown transfer identifier, a revoked user,
    /// or the transfer window has closed.
    case invalidRequest = "invalid_request"
    /// Apple: the access token or authorization code is unknown, expired or issued to someone else.
    case invalidGrant = "invalid_grant"
    /// Apple: `grant_type` is not one the endpoint supports.
    case unsupportedGrantType = "unsupported_grant_type"
    /// Apple: `scope` is not `user.migration`.
    case invalidScope = "invalid_scope"
    /// Control: no such team.
    case unknownTeam = "unknown_team"
    /// Control: no such app (client ID).
    case unknownApp = "unknown_app"
    /// Control: no such person or user identifier.
    case unknownUser = "unknown_user"
    /// Control: the call contradicts the current state (team exists, no pending transfer, …).
    case conflict = "conflict"
    /// Control: a malformed argument.
    case badInput = "bad_input"
    /// The state file could not be read or written.
    case stateFile = "state_file"
}
