import BatonEmulator
import Foundation

/// An app transfer set up on the emulator, the starting point of the fixtures that need one: the sending team
/// owns ``clientID`` and its users, the transfer to the receiving team is initiated with every user's transfer
/// identifier generated, and it is accepted unless asked otherwise.
public struct EmulatedTransfer: Sendable {
    /// The transferred app.
    public static let clientID = "com.example.app"
    public let sender: TeamCredentials
    public let recipient: TeamCredentials
    public let users: [EmulatedUser]
    /// Each user's transfer identifier, by their sending-team identifier.
    public let transferIdentifiers: [String: String]
    /// When the emulator accepted the transfer; nil when it was left pending.
    public let acceptedAt: Date?

    /// Sets the transfer up on `emulator` with `count` users (`privateEmail` as ``AppleEmulator/createUsers(clientID:count:privateEmail:)``).
    /// `initiate` false leaves the app with the sending team, no transfer started (and then nothing is accepted).
    public init(on emulator: AppleEmulator, users count: Int, privateEmail: Bool? = nil, initiate: Bool = true, accept: Bool = true) throws {
        sender = try emulator.createTeam()
        recipient = try emulator.createTeam()
        try emulator.createApp(clientID: EmulatedTransfer.clientID, teamID: sender.teamID)
        users = try emulator.createUsers(clientID: EmulatedTransfer.clientID, count: count, privateEmail: privateEmail)
        if initiate { try emulator.initiateTransfer(clientID: EmulatedTransfer.clientID, toTeamID: recipient.teamID) }
        transferIdentifiers = initiate ? try emulator.transferIdentifiers(clientID: EmulatedTransfer.clientID) : [:]
        acceptedAt = initiate && accept ? try emulator.acceptTransfer(clientID: EmulatedTransfer.clientID) : nil
    }

    /// Writes both teams' keys into `directory` as `sender.p8` and `recipient.p8`.
    public func writeKeys(to directory: KeyDirectory) throws {
        try directory.write("sender.p8", sender.privateKeyPEM)
        try directory.write("recipient.p8", recipient.privateKeyPEM)
    }

    /// Baton's configuration for this transfer as a JSON tree: the database at `databaseURL`, Apple at
    /// `appleBaseURL`, the teams' keys as ``writeKeys(to:)`` writes them, the application table `public.users`.
    /// `acceptedAt` overrides the acceptance time; without either, `accepted_at` is left out.
    public func configuration(databaseURL: String, appleBaseURL: URL, acceptedAt override: Date? = nil) -> [String: Any] {
        var transfer: [String: Any] = [
            "client_id": EmulatedTransfer.clientID,
            "sender": ["team_id": sender.teamID, "key_id": sender.keyID, "private_key_path": "sender.p8"],
            "recipient": ["team_id": recipient.teamID, "key_id": recipient.keyID, "private_key_path": "recipient.p8"],
        ]
        if let accepted = override ?? acceptedAt { transfer["accepted_at"] = ISO8601DateFormatter().string(from: accepted) }
        return [
            "database": ["url": databaseURL],
            "apple": ["base_url": appleBaseURL.absoluteString, "client_ids": [EmulatedTransfer.clientID], "transfer": transfer],
            "legacy": ["table": "public.users", "key_column": "id", "subject_column": "apple_sub", "email_column": "email"],
        ]
    }
}

extension KeyDirectory {
    /// Writes `tree` as JSON to `name` and returns the file's path.
    public func writeJSON(_ name: String, _ tree: [String: Any]) throws -> String {
        try write(name, String(decoding: try JSONSerialization.data(withJSONObject: tree), as: UTF8.self))
        return path(name)
    }
}
