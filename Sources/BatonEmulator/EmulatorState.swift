import BatonAppleSignIn
import Foundation

/// Everything the emulator knows, as plain values: saved to and loaded from a JSON file.
///
/// The methods here are the rules of Apple's transfer protocol, free of HTTP and cryptography;
/// `now` is always passed in (the emulator's adjustable clock).
struct EmulatorState: Codable, Sendable {
    /// Seconds added to the real clock (`POST /emulator/clock`).
    var clockOffset: Double = 0
    var teams: [String: Team] = [:]
    var apps: [String: App] = [:]
    var people: [String: Person] = [:]
    var nextPersonNumber = 1
    /// Team-scoped identifier → (person, team), for every identifier handed out.
    var identifierIndex: [String: IdentifierOwner] = [:]
    /// Transfer identifier → its record.
    var transferIdentifiers: [String: TransferIdentifier] = [:]
    /// RS256 signing keys, oldest first; the last one signs.
    var signingKeys: [SigningKey] = []
    var accessTokens: [String: AccessToken] = [:]
    var codes: [String: AuthorizationCode] = [:]
    var refreshTokens: [String: RefreshToken] = [:]
    /// A rehearsal's users, derived rather than stored (at most one cohort).
    var cohort: Cohort?

    /// The transfer window: 60 days after acceptance.
    static let transferWindow: Double = 60 * 86_400
    /// How many signing keys `/auth/keys` publishes (the active one and its predecessors).
    static let publishedKeyCount = 3
    /// Lifetime of access tokens (`expires_in`).
    static let accessTokenLifetime: Double = 3_600
    /// Lifetime of authorization codes.
    static let codeLifetime: Double = 300
    /// The most users one call creates.
    static let maxUsersPerCall = 1_000_000

    struct Team: Codable, Sendable {
        var teamID: String
        /// Key ID → PKCS#8 PEM of the team's ES256 key (Apple's .p8).
        var keys: [String: String]
    }

    struct Transfer: Codable, Sendable {
        var fromTeamID: String
        var toTeamID: String
        var initiatedAt: Date
        var acceptedAt: Date?
    }

    struct App: Codable, Sendable {
        var clientID: String
        var ownerTeamID: String
        /// Every transfer of this app, oldest first.
        var transfers: [Transfer] = []
        /// People who use the app.
        var users: Set<String> = []
        /// People who revoked the app.
        var revoked: Set<String> = []
    }

    struct Person: Codable, Sendable {
        var id: String
        /// The real address, used where the person chose not to hide it.
        var email: String
        var usesPrivateEmail: Bool
        /// Team ID → team-scoped identifier.
        var identifiers: [String: String] = [:]
        /// Team ID → private relay address for that team.
        var relayEmails: [String: String] = [:]
        /// Recipient team ID → transfer identifier.
        var transferIdentifiers: [String: String] = [:]
    }

    struct IdentifierOwner: Codable, Sendable {
        var personID: String
        var teamID: String
    }

    struct TransferIdentifier: Codable, Sendable {
        var personID: String
        var fromTeamID: String
        var toTeamID: String
    }

    struct SigningKey: Codable, Sendable {
        var kid: String
        var pem: String
        var createdAt: Date
    }

    struct AccessToken: Codable, Sendable {
        var teamID: String
        var clientID: String
        var expiresAt: Date
    }

    struct RefreshToken: Codable, Sendable {
        var clientID: String
        var personID: String
        var teamID: String
    }

    struct AuthorizationCode: Codable, Sendable {
        var clientID: String
        var personID: String
        var teamID: String
        var nonce: String?
        var expiresAt: Date
        var idToken: String
    }

    // MARK: - Scenario control

    mutating func addTeam(_ teamID: String, keyID: String, keyPEM: String) throws(EmulatorError) {
        guard Identifiers.isTenCharacters(teamID) else { throw EmulatorError(.badInput, "team_id must be 10 upper-case letters or digits") }
        guard teams[teamID] == nil else { throw EmulatorError(.conflict, "team \(teamID) exists") }
        teams[teamID] = Team(teamID: teamID, keys: [keyID: keyPEM])
    }

    mutating func addApp(_ clientID: String, teamID: String) throws(EmulatorError) {
        guard !clientID.isEmpty, clientID.count <= 255, !clientID.contains(where: \.isWhitespace) else {
            throw EmulatorError(.badInput, "client_id must be a non-empty bundle or services identifier")
        }
        guard teams[teamID] != nil else { throw EmulatorError(.unknownTeam, "team \(teamID)") }
        guard apps[clientID] == nil else { throw EmulatorError(.conflict, "app \(clientID) exists") }
        apps[clientID] = App(clientID: clientID, ownerTeamID: teamID)
    }

    /// Creates `count` people who use `clientID`; `privateEmail` nil alternates (first private).
    ///
    /// Given identities (a team's own subjects, a recipient's transfer identifiers): `userIdentifiers[i]` (when not
    /// nil, checked by ``checkGiven(_:)``) is person `i`'s identifier under the app's current team, and
    /// `transferIdentifiers[i]` (when not nil) their transfer identifier for `transferTarget`, as if the current team
    /// had generated it.
    mutating func addUsers(clientID: String, count: Int, privateEmail: Bool?, userIdentifiers: [String?]? = nil,
                           transferIdentifiers givenTransfers: [String?]? = nil, transferTarget: String? = nil) throws(EmulatorError) -> [Person] {
        guard var app = apps[clientID] else { throw EmulatorError(.unknownApp, clientID) }
        guard (1...EmulatorState.maxUsersPerCall).contains(count) else { throw EmulatorError(.badInput, "count must be 1 to \(EmulatorState.maxUsersPerCall)") }
        if let userIdentifiers {
            guard userIdentifiers.count == count else { throw EmulatorError(.badInput, "user identifiers must be one per user") }
            try checkGiven(userIdentifiers)
        }
        if let givenTransfers {
            let given = givenTransfers.compactMap { $0 }
            guard givenTransfers.count == count, Set(given).count == given.count, !given.contains("") else {
                throw EmulatorError(.badInput, "transfer identifiers must be distinct, one per user")
            }
            guard let target = transferTarget, teams[target] != nil, target != app.ownerTeamID else {
                throw EmulatorError(.unknownTeam, "transfer identifiers need another registered team as their target")
            }
            if given.contains(where: { transferIdentifiers[$0] != nil || identifierIndex[$0] != nil }) {
                throw EmulatorError(.conflict, "a transfer identifier is already in use")
            }
            if let userIdentifiers, !Set(userIdentifiers.compactMap { $0 }).isDisjoint(with: given) {
                throw EmulatorError(.conflict, "a transfer identifier is also a user identifier")
            }
        }
        var created: [Person] = []
        created.reserveCapacity(count)
        for index in 0..<count {
            let number = nextPersonNumber
            nextPersonNumber += 1
            let id = String(format: "person-%06d", number)
            let person = Person(id: id, email: "\(id)@example.com", usesPrivateEmail: privateEmail ?? (number % 2 == 1))
            people[id] = person
            app.users.insert(id)
            if let given = userIdentifiers?[index] {
                people[id]?.identifiers[app.ownerTeamID] = given
                identifierIndex[given] = IdentifierOwner(personID: id, teamID: app.ownerTeamID)
            } else {
                _ = identifier(of: id, team: app.ownerTeamID)
            }
            if let transfer = givenTransfers?[index], let target = transferTarget {
                people[id]?.transferIdentifiers[target] = transfer
                transferIdentifiers[transfer] = TransferIdentifier(personID: id, fromTeamID: app.ownerTeamID, toTeamID: target)
            }
            created.append(people[id]!)
        }
        apps[clientID] = app
        return created
    }

    /// Checks given user identifiers: each 1 to 255 characters, unique in the list, and no one's identifier yet.
    /// - Throws: ``EmulatorError`` `bad_input` naming the first identifier refused (`user_identifiers[i]`).
    private func checkGiven(_ identifiers: [String?]) throws(EmulatorError) {
        var seen: [String: Int] = [:]
        for (index, identifier) in identifiers.enumerated() {
            guard let identifier else { continue }
            let name = "user_identifiers[\(index)]"
            guard !identifier.isEmpty else { throw EmulatorError(.badInput, "\(name) is empty") }
            guard identifier.count <= 255 else { throw EmulatorError(.badInput, "\(name) is longer than 255 characters") }
            if let first = seen[identifier] { throw EmulatorError(.badInput, "\(name) \"\(identifier)\" repeats user_identifiers[\(first)]") }
            guard owner(of: identifier) == nil else { throw EmulatorError(.badInput, "\(name) \"\(identifier)\" is already a user identifier") }
            seen[identifier] = index
        }
    }

    /// Makes every Apple-shaped identifier under `clientID`'s current team a user of it, with a transfer identifier
    /// for `toTeamID` (``Cohort``).
    mutating func addCohort(clientID: String, toTeamID: String) throws(EmulatorError) {
        guard let app = apps[clientID] else { throw EmulatorError(.unknownApp, clientID) }
        guard teams[toTeamID] != nil, toTeamID != app.ownerTeamID else {
            throw EmulatorError(.unknownTeam, "a cohort's transfer identifiers need another registered team as their target")
        }
        guard cohort == nil else { throw EmulatorError(.conflict, "a cohort exists") }
        cohort = Cohort(clientID: clientID, fromTeamID: app.ownerTeamID, toTeamID: toTeamID)
    }

    mutating func initiateTransfer(clientID: String, toTeamID: String, now: Date) throws(EmulatorError) {
        guard var app = apps[clientID] else { throw EmulatorError(.unknownApp, clientID) }
        guard teams[toTeamID] != nil else { throw EmulatorError(.unknownTeam, toTeamID) }
        guard toTeamID != app.ownerTeamID else { throw EmulatorError(.conflict, "the app already belongs to \(toTeamID)") }
        if let last = app.transfers.last, last.acceptedAt == nil {
            throw EmulatorError(.conflict, "a transfer to \(last.toTeamID) is pending")
        }
        app.transfers.append(Transfer(fromTeamID: app.ownerTeamID, toTeamID: toTeamID, initiatedAt: now))
        apps[clientID] = app
    }

    mutating func acceptTransfer(clientID: String, now: Date) throws(EmulatorError) -> Transfer {
        guard var app = apps[clientID] else { throw EmulatorError(.unknownApp, clientID) }
        guard var transfer = app.transfers.last, transfer.acceptedAt == nil else {
            throw EmulatorError(.conflict, "no pending transfer of \(clientID)")
        }
        transfer.acceptedAt = now
        app.transfers[app.transfers.count - 1] = transfer
        app.ownerTeamID = transfer.toTeamID
        apps[clientID] = app
        return transfer
    }

    mutating func revoke(clientID: String, userIdentifier: String) throws(EmulatorError) {
        guard var app = apps[clientID] else { throw EmulatorError(.unknownApp, clientID) }
        guard let owner = owner(of: userIdentifier), uses(app, owner.personID) else {
            throw EmulatorError(.unknownUser, "no such user of \(clientID)")
        }
        app.revoked.insert(owner.personID)
        apps[clientID] = app
    }

    // MARK: - Identities

    /// The person's identifier under `team`, created on first use (derived for a cohort's member).
    mutating func identifier(of personID: String, team: String) -> String {
        if let cohort, let transferSub = Cohort.transferIdentifier(ofPerson: personID) {
            return cohort.identifier(ofTransferIdentifier: transferSub, team: team)
        }
        if let existing = people[personID]?.identifiers[team] { return existing }
        var value = Identifiers.userIdentifier()
        while identifierIndex[value] != nil { value = Identifiers.userIdentifier() }
        people[personID]?.identifiers[team] = value
        identifierIndex[value] = IdentifierOwner(personID: personID, teamID: team)
        return value
    }

    /// The address the person shares with `team`: a team-specific relay address or the real one.
    mutating func email(of personID: String, team: String) -> (email: String, isPrivate: Bool) {
        if let cohort, let transferSub = Cohort.transferIdentifier(ofPerson: personID) {
            return cohort.email(ofTransferIdentifier: transferSub, team: team)
        }
        guard let person = people[personID] else { return ("", false) }
        guard person.usesPrivateEmail else { return (person.email, false) }
        if let relay = person.relayEmails[team] { return (relay, true) }
        let relay = Identifiers.privateRelayEmail()
        people[personID]?.relayEmails[team] = relay
        return (relay, true)
    }

    /// The person a `user` argument names: a person ID or any team-scoped identifier of theirs.
    func person(named user: String) -> String? {
        if people[user] != nil || (cohort != nil && Cohort.transferIdentifier(ofPerson: user) != nil) { return user }
        return owner(of: user)?.personID
    }

    /// Who a team-scoped identifier belongs to: one handed out, or a cohort member's sender identifier.
    func owner(of identifier: String) -> IdentifierOwner? {
        if let owner = identifierIndex[identifier] { return owner }
        guard let cohort, let personID = cohort.person(ofSenderIdentifier: identifier) else { return nil }
        return IdentifierOwner(personID: personID, teamID: cohort.fromTeamID)
    }

    /// Whether the person uses `app`: one of its users, or a member of its cohort.
    func uses(_ app: App, _ personID: String) -> Bool {
        app.users.contains(personID) || (cohort?.clientID == app.clientID && Cohort.transferIdentifier(ofPerson: personID) != nil)
    }

    /// Whether `team` knows the person by an identifier (handed out, or as a cohort's sending team).
    func isKnown(_ personID: String, to team: String) -> Bool {
        if let cohort, Cohort.transferIdentifier(ofPerson: personID) != nil { return cohort.fromTeamID == team }
        return people[personID]?.identifiers[team] != nil
    }

    /// Whether `now` is within 60 days (inclusive) of the transfer's acceptance; a pending transfer is.
    static func withinWindow(_ transfer: Transfer, now: Date) -> Bool {
        guard let accepted = transfer.acceptedAt else { return true }
        return now.timeIntervalSince(accepted) <= transferWindow
    }

    /// The accepted transfer of `app` whose 60-day window contains `now`, if any.
    static func activeAcceptedTransfer(of app: App, now: Date) -> Transfer? {
        guard let last = app.transfers.last, last.acceptedAt != nil, withinWindow(last, now: now) else { return nil }
        return last
    }

    /// Whether `teamID` may call Apple's endpoints for `app`: its owner, or the sending team of a
    /// transfer that is pending or within its window.
    static func teamActsFor(_ app: App, teamID: String, now: Date) -> Bool {
        if app.ownerTeamID == teamID { return true }
        guard let last = app.transfers.last else { return false }
        return last.fromTeamID == teamID && withinWindow(last, now: now)
    }

    // MARK: - Apple's transfer endpoint

    /// Sender side: the transfer identifier of `sub` (an identifier under `teamID`) for `target`.
    ///
    /// The sending team may ask from the moment it owns the app, before any transfer is initiated (Apple has it
    /// generate transfer identifiers while it prepares its data), until 60 days after the recipient accepted.
    /// Once a transfer is initiated, `target` must be its recipient; before, any other registered team.
    /// - Throws: ``EmulatorError`` `invalid_client` (the team neither owns the app nor sent it within the
    ///   window), `invalid_request` (wrong target, unknown `sub`, revoked user).
    mutating func senderTransferIdentifier(clientID: String, teamID: String, sub: String, target: String, now: Date) throws(EmulatorError) -> String {
        guard let app = apps[clientID] else { throw EmulatorError(.invalidClient, "unknown client_id") }
        guard EmulatorState.teamActsFor(app, teamID: teamID, now: now) else {
            throw EmulatorError(.invalidClient, "the app does not belong to this team")
        }
        if let last = app.transfers.last, last.fromTeamID == teamID, last.acceptedAt == nil || app.ownerTeamID != teamID {
            guard last.toTeamID == target else { throw EmulatorError(.invalidRequest, "target is not the recipient of the transfer") }
        }
        guard target != teamID, teams[target] != nil else { throw EmulatorError(.invalidRequest, "target is not another team") }
        guard let owner = owner(of: sub), owner.teamID == teamID, uses(app, owner.personID) else {
            throw EmulatorError(.invalidRequest, "unknown sub")
        }
        guard !app.revoked.contains(owner.personID) else { throw EmulatorError(.invalidRequest, "the user revoked the app") }
        return transferIdentifier(of: owner.personID, from: teamID, to: target)
    }

    /// The transfer identifier of a person from one team to another, created on first use: the same value
    /// whichever needs it first, the sender's `/auth/usermigrationinfo` or a sign-in during the window
    /// (derived for a cohort's member, from its sending team to its recipient).
    mutating func transferIdentifier(of personID: String, from: String, to: String) -> String {
        if let cohort, let transferSub = Cohort.transferIdentifier(ofPerson: personID), cohort.fromTeamID == from, cohort.toTeamID == to {
            return transferSub
        }
        if let existing = people[personID]?.transferIdentifiers[to], transferIdentifiers[existing]?.fromTeamID == from {
            return existing
        }
        var value = Identifiers.transferIdentifier()
        while transferIdentifiers[value] != nil || identifierIndex[value] != nil { value = Identifiers.transferIdentifier() }
        people[personID]?.transferIdentifiers[to] = value
        transferIdentifiers[value] = TransferIdentifier(personID: personID, fromTeamID: from, toTeamID: to)
        return value
    }

    /// Recipient side: the identity behind a transfer identifier, for the recipient team, from acceptance until
    /// 60 days later.
    /// - Throws: ``EmulatorError`` `invalid_client` (the app was not transferred to this team), `invalid_request`
    ///   (the window has closed, unknown `transfer_sub`, revoked user).
    mutating func exchange(clientID: String, teamID: String, transferSub: String, now: Date) throws(EmulatorError) -> (sub: String, email: String?, isPrivate: Bool) {
        guard let app = apps[clientID] else { throw EmulatorError(.invalidClient, "unknown client_id") }
        guard let transfer = app.transfers.last, transfer.acceptedAt != nil, transfer.toTeamID == teamID else {
            throw EmulatorError(.invalidClient, "the app was not transferred to this team")
        }
        guard EmulatorState.withinWindow(transfer, now: now) else {
            throw EmulatorError(.invalidRequest, "the transfer window has closed")
        }
        guard let record = transferIdentifiers[transferSub] ?? cohortTransfer(transferSub, clientID: clientID), record.toTeamID == teamID,
              record.fromTeamID == transfer.fromTeamID, uses(app, record.personID) else {
            throw EmulatorError(.invalidRequest, "unknown transfer_sub")
        }
        guard !app.revoked.contains(record.personID) else { throw EmulatorError(.invalidRequest, "the user revoked the app") }
        let sub = identifier(of: record.personID, team: teamID)
        let (email, isPrivate) = email(of: record.personID, team: teamID)
        return (sub, isPrivate ? email : nil, isPrivate)
    }

    /// The cohort member a transfer identifier names, as a transfer record.
    private func cohortTransfer(_ transferSub: String, clientID: String) -> TransferIdentifier? {
        guard let cohort, cohort.clientID == clientID, let personID = cohort.person(ofTransferIdentifier: transferSub) else { return nil }
        return TransferIdentifier(personID: personID, fromTeamID: cohort.fromTeamID, toTeamID: cohort.toTeamID)
    }

    // MARK: - Devices

    /// What a device's credential-state query answers for `userIdentifier` in `clientID`.
    func credentialState(clientID: String, userIdentifier: String) -> CredentialState {
        guard let app = apps[clientID], let owner = owner(of: userIdentifier), uses(app, owner.personID) else {
            return .notFound
        }
        if app.revoked.contains(owner.personID) { return .revoked }
        if owner.teamID == app.ownerTeamID { return .authorized }
        if app.transfers.contains(where: { $0.acceptedAt != nil && $0.fromTeamID == owner.teamID }) { return .transferred }
        return .notFound
    }

    /// Removes expired access tokens and codes.
    mutating func purgeExpired(now: Date) {
        accessTokens = accessTokens.filter { $0.value.expiresAt > now }
        codes = codes.filter { $0.value.expiresAt > now }
    }
}
