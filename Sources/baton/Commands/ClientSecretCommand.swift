import BatonCommandLine
import BatonAppleSignIn
import Foundation

/// `baton client-secret`: prints an ES256 client secret for Apple's REST API.
let clientSecretCommand = Command(
    name: "client-secret",
    summary: "print an ES256 client_secret for Apple's REST API",
    abstract: """
    Prints a client secret (an ES256 JWT) signed with the team's Sign in with Apple key, for calls made by
    hand (curl). Baton's own jobs make short-lived secrets themselves and never need this.
    """,
    options: ClientSecretOptions.self,
    discussion: """
    The secret is printed on standard output and nowhere else; its expiry goes to standard error.
    Exit status: 0 printed, 1 the key file is unreadable or not a P-256 key, 2 usage.
    """,
    run: { parsed in
        let teamID = parsed.teamID
        let keyID = parsed.keyID
        let keyPath = parsed.key
        let clientID = parsed.clientID
        let days = parsed.days
        guard AppleIdentifierFormat.isTeamID(teamID) else {
            throw CommandFailure.usage("--team-id must be 10 upper-case letters or digits")
        }
        guard AppleIdentifierFormat.isKeyID(keyID) else {
            throw CommandFailure.usage("--key-id must be 10 letters or digits")
        }
        if let problem = AppleIdentifierFormat.clientIDProblem(clientID) {
            throw CommandFailure.usage("--client-id: \(problem)")
        }
        let signer: ClientSecret
        do {
            signer = try await ClientSecret.load(teamID: teamID, keyID: keyID, clientID: clientID, keyFile: keyPath)
        } catch let error as AppleClientError {
            throw CommandFailure.rejected("baton client-secret: \(error.description)")
        }
        let issuedAt = Date()
        let lifetime = TimeInterval(days) * 86_400
        let secret = try signer.clientSecret(issuedAt: issuedAt, lifetime: lifetime)
        print(secret)
        let expiry = Date(timeIntervalSince1970: issuedAt.timeIntervalSince1970.rounded(.down) + lifetime)
        printError("baton client-secret: valid until \(expiry.formatted(.iso8601)) for \(clientID) (team \(teamID), key \(keyID))")
        return 0
    }
)

/// The options of `baton client-secret`.
private struct ClientSecretOptions: CommandOptions {
    let teamID = Option.text("team-id", "T", "the team that owns the key (10 upper-case letters or digits): the secret's iss").required()
    let keyID = Option.text("key-id", "K", "the key's ID (10 characters): the header's kid").required()
    let key = Option.text("key", "FILE.p8", "the key, as downloaded from the developer account (PKCS#8 PEM, EC P-256)").required()
    let clientID = Option.text("client-id", "C", "the bundle ID or Services ID, without the team prefix: the secret's sub").required()
    let days = Option.integer("days", "D", default: 1, in: 1...182, "lifetime in days, 1 to 182 (Apple's limit is six months)")
}
