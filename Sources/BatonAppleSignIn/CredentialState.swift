/// What Apple's `getCredentialState(forUserID:)` answers for a user identifier
/// (`ASAuthorizationAppleIDProvider.CredentialState`), and what Baton's `GET /v1/credential-state` answers
/// for web and Android clients by the same rules.
///
/// One type for Baton and the emulator (which does not depend on Baton): the raw values are the
/// `state` members of both HTTP answers.
public enum CredentialState: String, Sendable, Equatable, Codable, CaseIterable {
    /// An identifier of the app's current (receiving) team, or of the sending team before the transfer
    /// is accepted; consent not revoked.
    case authorized
    /// An identifier of the team the app was transferred away from, once the transfer is accepted:
    /// the client re-authorizes silently and receives the current team's identifier.
    case transferred
    /// Consent revoked, or the Apple account deleted.
    case revoked
    /// An unknown identifier, or not a user of this app.
    case notFound = "not_found"
}
