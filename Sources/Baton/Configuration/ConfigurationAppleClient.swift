import BatonAppleSignIn
import Foundation
import BatonLogging

extension BatonConfiguration {
    /// A side of the transfer, whose credentials sign the calls.
    public enum TransferSide: String, Sendable, CaseIterable {
        /// The sending team: creates transfer identifiers (`baton transfer-ids`).
        case sender
        /// The receiving team: exchanges transfer identifiers (`baton exchange`).
        case recipient
    }

    /// The credentials configured for `side`.
    /// - Throws: ``ConfigurationError`` `missing` naming `apple.transfer` or `apple.transfer.<side>`.
    public func credentials(for side: TransferSide) throws -> (clientID: String, credentials: TeamCredentials) {
        guard let transfer = apple.transfer else {
            throw ConfigurationError(.missing, key: "apple.transfer", reason: "no transfer is configured")
        }
        let credentials = side == .sender ? transfer.sender : transfer.recipient
        guard let credentials else {
            throw ConfigurationError(.missing, key: "apple.transfer.\(side.rawValue)", reason: "the \(side.rawValue)'s team ID, key ID and key file are needed")
        }
        return (transfer.clientID, credentials)
    }

    /// An ``AppleClient`` for `side`: its key file read (off Swift's cooperative threads), `apple.base_url`,
    /// and `options`. Use the sender's client for transfer identifiers and the recipient's for exchanges.
    /// - Throws: ``ConfigurationError`` when the side is not configured; ``AppleClientError`` `keyUnreadable`,
    ///   `keyInvalid` or `invalidParameter` when its key cannot be used.
    public func appleClient(for side: TransferSide, options: AppleClient.Options = AppleClient.Options(), logger: Logger = .disabled()) async throws -> AppleClient {
        let (clientID, credentials) = try credentials(for: side)
        let signer = try await ClientSecret.load(teamID: credentials.teamID, keyID: credentials.keyID, clientID: clientID, keyFile: credentials.privateKeyPath)
        return AppleClient(baseURL: apple.baseURL, credentials: signer, options: options, logger: logger.with("side", side.rawValue))
    }
}
