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

    /// The signing credentials configured for `side`: its team ID, key ID and key file.
    /// - Throws: ``ConfigurationError`` `missing` naming `apple.transfer`, `apple.transfer.<side>`, or the side's
    ///   `key_id` or `private_key_path` when only its team is named.
    public func credentials(for side: TransferSide) throws -> (clientID: String, teamID: String, keyID: String, privateKeyPath: String) {
        guard let transfer = apple.transfer else {
            throw ConfigurationError(.missing, key: "apple.transfer", reason: "no transfer is configured")
        }
        let credentials = side == .sender ? transfer.sender : transfer.recipient
        guard let credentials else {
            throw ConfigurationError(.missing, key: "apple.transfer.\(side.rawValue)", reason: "the \(side.rawValue)'s team ID, key ID and key file are needed")
        }
        let signs = side == .sender ? "creates transfer identifiers (baton transfer-ids)" : "exchanges transfer identifiers (baton exchange)"
        guard let keyID = credentials.keyID else {
            throw ConfigurationError(.missing, key: "apple.transfer.\(side.rawValue).key_id",
                                     reason: "the \(side.rawValue)'s own key \(signs); this machine names the \(side.rawValue) by its team ID only")
        }
        guard let privateKeyPath = credentials.privateKeyPath else {
            throw ConfigurationError(.missing, key: "apple.transfer.\(side.rawValue).private_key_path", reason: "key_id is set but the .p8 file is not")
        }
        return (transfer.clientID, credentials.teamID, keyID, privateKeyPath)
    }

    /// An ``AppleClient`` for `side`: its key file read (off Swift's cooperative threads), `apple.base_url`,
    /// and `options`. Use the sender's client for transfer identifiers and the recipient's for exchanges.
    /// - Throws: ``ConfigurationError`` when the side is not configured; ``AppleClientError`` `keyUnreadable`,
    ///   `keyInvalid` or `invalidParameter` when its key cannot be used.
    public func appleClient(for side: TransferSide, options: AppleClient.Options = AppleClient.Options(), logger: Logger = .disabled()) async throws -> AppleClient {
        let credentials = try credentials(for: side)
        let signer = try await ClientSecret.load(teamID: credentials.teamID, keyID: credentials.keyID, clientID: credentials.clientID,
                                                 keyFile: credentials.privateKeyPath)
        return AppleClient(baseURL: apple.baseURL, credentials: signer, options: options, logger: logger.with("side", side.rawValue))
    }
}
