import BatonAppleSignIn
import BatonPostgres

/// What Baton's tables know of one user identifier: the facts the credential-state rules read.
///
/// Between two companies the recipient's table may hold a transferred user with a NULL subject and only the
/// transfer identifier; a NULL subject matches no identifier, so such a row counts for nothing here until a
/// migration writes the receiving team's identifier into it.
public struct CredentialFacts: Sendable, Equatable {
    /// The state `baton.subjects` holds (from Apple's notifications); nil when none.
    public var subjectState: SubjectState?
    /// A receiving-team identifier: the new identifier of a migrated user (`baton.transfers.new_sub`).
    public var isReceivingTeamIdentifier: Bool
    /// A sending-team identifier: `baton.transfers.old_sub`, or (with `legacy.transfer_column`) the subject of
    /// a record whose transfer column holds a transfer identifier.
    public var isSendingTeamIdentifier: Bool
    /// A record of the application's table carries it as its subject.
    public var isOnRecord: Bool

    /// Creates facts.
    public init(subjectState: SubjectState?, isReceivingTeamIdentifier: Bool, isSendingTeamIdentifier: Bool, isOnRecord: Bool) {
        self.subjectState = subjectState
        self.isReceivingTeamIdentifier = isReceivingTeamIdentifier
        self.isSendingTeamIdentifier = isSendingTeamIdentifier
        self.isOnRecord = isOnRecord
    }
}

extension CredentialState {
    /// The answer `getCredentialState(forUserID:)` gives, from what Baton knows, in this order:
    ///
    /// 1. revoked or deleted through a notification → ``revoked``;
    /// 2. a receiving-team identifier (a migrated record's new identifier) → ``authorized``;
    /// 3. a sending-team identifier → ``transferred`` once `apple.transfer.accepted_at` has passed,
    ///    ``authorized`` before (the app has not moved yet);
    /// 4. any other identifier a record carries (a user who signed up after the transfer) → ``authorized``;
    /// 5. otherwise → ``notFound``.
    ///
    /// Rule 4 also answers ``authorized`` for a sending-team identifier Baton holds no transfer data for (a record
    /// added after `baton transfer-ids` walked the table): Baton cannot tell it from a sign-up after the transfer,
    /// and answering ``transferred`` for a sign-up would send its client round a re-authorization that returns
    /// the same identifier. Running `baton transfer-ids` again gives such records their transfer row.
    public init(_ facts: CredentialFacts, transferAccepted: Bool) {
        if let state = facts.subjectState, state != .authorized {
            self = .revoked
        } else if facts.isReceivingTeamIdentifier {
            self = .authorized
        } else if facts.isSendingTeamIdentifier {
            self = transferAccepted ? .transferred : .authorized
        } else if facts.isOnRecord {
            self = .authorized
        } else {
            self = .notFound
        }
    }
}

extension LegacyStore {
    /// What `baton.subjects`, `baton.transfers` and the application's table know of `sub`; one statement, each
    /// part an index lookup (the primary key or unique column of Baton's tables, the subject column's index).
    /// - Throws: ``PostgresError``.
    public func credentialFacts(of sub: String) async throws -> CredentialFacts {
        let l = legacy
        // Only the Apple rows (`legacy.where`) count: another provider's row with the same subject is not this user.
        let carries: PostgresQuery = "EXISTS (SELECT 1 FROM \(l.table) AS u WHERE " + l.subjectEqualsSQL(l.storedSubjectSQL(sub)) + l.filterSQL()
        var query: PostgresQuery = """
            SELECT (SELECT state FROM baton.subjects WHERE sub = \(sub)),
                   EXISTS (SELECT 1 FROM baton.transfers WHERE new_sub = \(sub)),
                   EXISTS (SELECT 1 FROM baton.transfers WHERE old_sub = \(sub))
            """
        if let column = l.transferColumn {
            query = query + " OR " + carries + " AND u.\(column) IS NOT NULL)"
        }
        query = query + ", " + carries + ")"
        let row = try await pool.query(query)[0]
        return CredentialFacts(subjectState: try row.decode(String?.self, at: 0).flatMap(SubjectState.init(rawValue:)),
                               isReceivingTeamIdentifier: try row.decode(Bool.self, at: 1),
                               isSendingTeamIdentifier: try row.decode(Bool.self, at: 2),
                               isOnRecord: try row.decode(Bool.self, at: 3))
    }
}
