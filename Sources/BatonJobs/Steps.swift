import Baton
import BatonAppleSignIn
import Foundation

/// Applies an exchanged user to the legacy record exactly as a sign-in migration does (same rules, same audit
/// event), with `method = exchange`; the migration store implements it.
public protocol ExchangeApplier: Sendable {
    /// Rewrites the legacy record of `oldSub` (or, when nil, the one `transferSub` leads to) to `user` once.
    /// Returns ``BulkStepOutcome/alreadyDone`` when the record was already migrated (by a sign-in or another
    /// worker) and nothing changed.
    /// - Throws: ``Postgres/PostgresError``.
    func applyExchange(oldSub: String?, transferSub: String, user: ExchangedUser) async throws -> BulkStepOutcome
}

/// `baton exchange`: the recipient side of `/auth/usermigrationinfo` for one pending transfer, then the rewrite.
public struct ExchangeStep: BulkJobStep {
    /// The recipient team's client.
    public let client: AppleClient
    /// Where answers are applied.
    public let applier: any ExchangeApplier

    /// Creates the step.
    public init(client: AppleClient, applier: any ExchangeApplier) {
        self.client = client
        self.applier = applier
    }

    /// Exchanges the row's transfer identifier with Apple and applies the answer.
    /// - Throws: ``AppleSignIn/AppleClientError``, ``Postgres/PostgresError``.
    public func perform(_ item: TransferQueue.Item) async throws -> BulkStepOutcome {
        guard let transferSub = item.transferSub else { return .alreadyDone }
        let user = try await client.exchange(transferIdentifier: transferSub)
        return try await applier.applyExchange(oldSub: item.oldSub, transferSub: transferSub, user: user)
    }
}

/// `baton transfer-ids`: the sender side of `/auth/usermigrationinfo` for one legacy user, then storing
/// `old_sub → transfer_sub`.
public struct TransferIdentifierStep: BulkJobStep {
    /// The sending team's client.
    public let client: AppleClient
    /// The recipient's team ID (never the sender's own).
    public let targetTeamID: String
    /// The queue, which stores the answer.
    public let queue: TransferQueue

    /// Creates the step.
    /// - Throws: ``BulkJobError`` `targetIsSender` when `targetTeamID` is the client's own team.
    public init(client: AppleClient, targetTeamID: String, queue: TransferQueue) throws {
        guard targetTeamID != client.teamID else {
            throw BulkJobError(.targetIsSender, "the target team \(targetTeamID) is the sending team itself: transfer identifiers must be made for the recipient's team")
        }
        self.client = client
        self.targetTeamID = targetTeamID
        self.queue = queue
    }

    /// Asks Apple for the user's transfer identifier for the target team and stores it.
    /// - Throws: ``AppleSignIn/AppleClientError``, ``Postgres/PostgresError``.
    public func perform(_ item: TransferQueue.Item) async throws -> BulkStepOutcome {
        guard let oldSub = item.oldSub else { return .alreadyDone }
        let transferSub = try await client.transferIdentifier(forUser: oldSub, targetTeamID: targetTeamID)
        return try await queue.storeTransferIdentifier(item, transferSub: transferSub) ? .done : .alreadyDone
    }
}

extension LegacyStore: ExchangeApplier {
    /// Applies the exchange through ``applyMigration(oldSub:newSub:newEmail:isPrivateEmail:transferSub:method:)``
    /// with `method = exchange`, so an exchange and a sign-in of the same user rewrite it once between them.
    /// A record already migrated whose `baton.transfers` row is still pending (migrated outside Baton's
    /// jobs) has that row closed as migrated; a missing record or a conflict is ``BulkStepOutcome/unresolvable(_:)``, a conflict
    /// with a second record of the user recorded as a duplicate (merged at once with `legacy.on_duplicate` `merge`).
    public func applyExchange(oldSub: String?, transferSub: String, user: ExchangedUser) async throws -> BulkStepOutcome {
        let outcome = if let oldSub {
            try await applyMigration(oldSub: oldSub, newSub: user.sub, newEmail: user.email, isPrivateEmail: user.isPrivateEmail,
                                     transferSub: transferSub, method: .exchange)
        } else {
            try await applyMigration(transferSub: transferSub, newSub: user.sub, newEmail: user.email, isPrivateEmail: user.isPrivateEmail,
                                     method: .exchange)
        }
        switch outcome {
        case .migrated:
            return .done
        case .alreadyMigrated:
            try await pool.execute("""
                UPDATE baton.transfers SET state = 'migrated', new_sub = COALESCE(new_sub, \(user.sub)), method = COALESCE(method, 'exchange'),
                    migrated_at = COALESCE(migrated_at, now()), lease_owner = NULL, lease_expires_at = NULL, updated_at = now()
                WHERE (old_sub = \(oldSub) OR transfer_sub = \(transferSub)) AND state = 'pending'
                """)
            return .alreadyDone
        case .legacyRecordMissing:
            return .unresolvable("no legacy record carries the old identifier")
        case .conflict:
            // Most likely a sign-in that bypassed Baton made a second record (baton.duplicates; `baton merge`).
            guard let recorded = try await recordDuplicate(newSub: user.sub, oldSub: oldSub, transferSub: transferSub, foundBy: .exchange) else {
                return .unresolvable("the new identifier already belongs to another legacy record")
            }
            if let pair = duplicatePolicy.pairToMerge(recorded), try await mergeDuplicate(pair) != nil { return .done }
            return .unresolvable("the new identifier already belongs to another legacy record: a duplicate, for baton merge")
        }
    }
}
