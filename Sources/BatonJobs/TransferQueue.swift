import Baton
import BatonConcurrency
import Foundation
import BatonPostgres
import Synchronization

/// The lease-based work queue of the bulk jobs, over `baton.transfers`, coordinated only through PostgreSQL.
///
/// A worker claims a batch of due rows with `FOR UPDATE SKIP LOCKED` (so concurrent claimers, in this process
/// or on other machines, never get the same row) and leases them to its owner until `lease_expires_at`. Rows of
/// a worker that died are claimable again once their lease expires. A transient failure defers a row with an
/// exponential backoff (`next_attempt_at`); after ``maxAttempts`` it is `failed`.
public struct TransferQueue: Sendable {
    /// Which rows a job works on.
    public enum Kind: String, Sendable {
        /// Pending rows with a transfer identifier: `baton exchange`.
        case exchange
        /// Pending rows without a transfer identifier: `baton transfer-ids`.
        case transferIdentifiers = "transfer-ids"

        var condition: String {
            switch self {
            case .exchange: "state = 'pending' AND transfer_sub IS NOT NULL"
            case .transferIdentifiers: "state = 'pending' AND transfer_sub IS NULL"
            }
        }
    }

    /// A leased row.
    public struct Item: Sendable, Equatable {
        /// The row's `id`.
        public var id: Int64
        /// The sending team's identifier (nil for a cross-company import, which knows only the transfer identifier).
        public var oldSub: String?
        /// The transfer identifier (nil for the sender job).
        public var transferSub: String?
        /// Attempts recorded before this one.
        public var attempts: Int
        /// When the lease ends, on the local clock (the row must not be worked on after).
        public var leaseEnds: Date
    }

    /// The pool.
    public let pool: PostgresPool
    /// The rows this queue serves.
    public let kind: Kind
    /// The lease holder's name: host, process and a random part.
    public let owner: String
    /// How long a claim lasts, in seconds.
    public let leaseSeconds: Int
    /// Attempts before a row is `failed`.
    public let maxAttempts: Int
    /// The first retry's delay, in seconds; doubled per attempt up to 300.
    public let retryBaseSeconds: Double
    /// Writes the sender job's answers a batch at a time (shared by copies of this queue).
    private let writer: TransferIdentifierWriter

    /// Creates a queue.
    public init(pool: PostgresPool, kind: Kind, owner: String = TransferQueue.defaultOwner(), leaseSeconds: Int = 60, maxAttempts: Int = 5, retryBaseSeconds: Double = 5) {
        self.pool = pool
        self.kind = kind
        self.owner = owner
        self.leaseSeconds = max(1, leaseSeconds)
        self.maxAttempts = max(1, maxAttempts)
        self.retryBaseSeconds = max(0, retryBaseSeconds)
        writer = TransferIdentifierWriter(pool: pool)
    }

    /// `host:pid:random`.
    public static func defaultOwner() -> String {
        "\(ProcessInfo.processInfo.hostName):\(getpid()):\(UUID().uuidString.prefix(8).lowercased())"
    }

    /// Leases up to `limit` due rows to this owner, in the queue's order: the rows never deferred by id, then the
    /// deferred ones as they come due.
    public func claim(limit: Int) async throws -> [Item] {
        try await claim(limit: limit, after: nil).items
    }

    /// ``claim(limit:)`` going on from where the last claim got to: the never-deferred rows with ids above `after`,
    /// and only when none is left there (the pass reached the end, or `after` is nil) the whole queue from its start.
    /// Returns the rows and where the next claim goes on from. A claim from the start reads the queue's index past
    /// the entries of every row finished since the last vacuum; going on from the last id reads each only once.
    public func claim(limit: Int, after: Int64?) async throws -> (items: [Item], next: Int64?) {
        if let after {
            let onward = try await lease(limit: limit, where: "AND next_attempt_at IS NULL AND id > \(after)")
            if !onward.items.isEmpty { return (onward.items, onward.lastNeverDeferred ?? after) }
        }
        let all = try await lease(limit: limit, where: "AND (next_attempt_at IS NULL OR next_attempt_at <= now())")
        return (all.items, all.lastNeverDeferred ?? after)
    }

    /// Leases up to `limit` due rows meeting `condition` besides the queue's own; returns them and the largest id
    /// among those never deferred.
    private func lease(limit: Int, where condition: PostgresQuery) async throws -> (items: [Item], lastNeverDeferred: Int64?) {
        let started = Date()
        let rows = try await pool.query("""
            UPDATE baton.transfers t SET lease_owner = \(owner), lease_expires_at = now() + make_interval(secs => \(Double(leaseSeconds))), updated_at = now()
            FROM (
                SELECT id FROM baton.transfers
                WHERE \(unsafeRaw: kind.condition)
                  AND (lease_expires_at IS NULL OR lease_expires_at < now())
            """ + " " + condition + """

                ORDER BY next_attempt_at NULLS FIRST, id
                LIMIT \(max(1, limit))
                FOR UPDATE SKIP LOCKED
            ) due
            WHERE t.id = due.id
            RETURNING t.id, t.old_sub, t.transfer_sub, t.attempts, t.next_attempt_at IS NULL
            """)
        // The local deadline leaves a margin for clock steps and the time the claim itself took.
        let leaseEnds = started.addingTimeInterval(Double(leaseSeconds) * 0.9)
        var lastNeverDeferred: Int64?
        let items = try rows.map { row in
            let item = Item(id: try row.decode(Int64.self, at: 0), oldSub: try row.decode(String?.self, at: 1), transferSub: try row.decode(String?.self, at: 2),
                            attempts: try row.decode(Int.self, at: 3), leaseEnds: leaseEnds)
            if try row.decode(Bool.self, at: 4) { lastNeverDeferred = max(lastNeverDeferred ?? item.id, item.id) }
            return item
        }
        return (items, lastNeverDeferred)
    }

    /// Rows still pending for this queue (leased, deferred or due).
    public func pendingCount() async throws -> Int {
        try await pool.query("SELECT count(*) FROM baton.transfers WHERE \(unsafeRaw: kind.condition)")[0].decode(Int.self, at: 0)
    }

    /// Seconds until the next deferred or leased row becomes due; nil when none is pending.
    public func secondsUntilNextDue() async throws -> Double? {
        let row = try await pool.query("""
            SELECT EXTRACT(EPOCH FROM min(greatest(coalesce(next_attempt_at, now()), coalesce(lease_expires_at, now())) - now()))::float8
            FROM baton.transfers WHERE \(unsafeRaw: kind.condition)
            """)[0]
        return try row.decode(Double?.self, at: 0).map { max(0, $0) }
    }

    /// Stores the sender side's answer: the row's transfer identifier. Returns false when the row was no longer
    /// this owner's to finish (another worker finished it).
    ///
    /// Answers stored at the same time by this queue's workers go in one statement (group commit): the first
    /// caller's statement takes every answer waiting, and the answers that arrive while it runs go in the next.
    /// Each caller returns once its own row is written (or not), as with a statement of its own; a failed
    /// statement throws its error to every caller whose answer it carried (nothing of it was written).
    /// - Throws: ``Postgres/PostgresError``.
    public func storeTransferIdentifier(_ item: Item, transferSub: String) async throws -> Bool {
        try await writer.store(id: item.id, transferSub: transferSub)
    }

    /// The statement that stores `answers` (row id → transfer identifier; ids distinct), in id order; returns the
    /// ids of the rows it wrote: those still pending without a transfer identifier.
    static func storeQuery(_ answers: [(id: Int64, transferSub: String)]) -> PostgresQuery {
        let sorted = answers.sorted { $0.id < $1.id }
        return """
            UPDATE baton.transfers AS t SET transfer_sub = a.transfer_sub, attempts = t.attempts + 1, last_error = NULL,
                lease_owner = NULL, lease_expires_at = NULL, next_attempt_at = NULL, updated_at = now()
            FROM unnest(\(arrayLiteral(sorted.map { String($0.id) }))::bigint[], \(arrayLiteral(sorted.map(\.transferSub)))::text[])
                AS a(id, transfer_sub)
            WHERE t.id = a.id AND t.state = 'pending' AND t.transfer_sub IS NULL
            RETURNING t.id
            """
    }

    /// Records an attempt that failed for a reason that may pass: the row is due again after a backoff, or
    /// `failed` once it has had ``maxAttempts``. Returns whether it is now `failed`.
    @discardableResult
    public func postpone(_ item: Item, reason: String) async throws -> Bool {
        let attempts = item.attempts + 1
        let final = attempts >= maxAttempts
        let delay = Backoff(initial: retryBaseSeconds, cap: 300, jittered: 0).delay(afterAttempt: attempts, jitter: 0)
        try await pool.execute("""
            UPDATE baton.transfers SET attempts = attempts + 1, last_error = \(reason),
                state = CASE WHEN \(final) THEN 'failed' ELSE state END,
                next_attempt_at = now() + make_interval(secs => \(delay)),
                lease_owner = NULL, lease_expires_at = NULL, updated_at = now()
            WHERE id = \(item.id) AND state = 'pending' AND lease_owner = \(owner)
            """)
        return final
    }

    /// Records that Apple refused the user for good (revoked, unknown, another team's): `unresolvable`. Fenced by
    /// the lease: returns false, changing nothing, when the row is no longer this owner's (its lease ended and
    /// another worker took it).
    @discardableResult
    public func markUnresolvable(_ item: Item, reason: String) async throws -> Bool {
        try await pool.execute("""
            UPDATE baton.transfers SET state = 'unresolvable', attempts = attempts + 1, last_error = \(reason),
                lease_owner = NULL, lease_expires_at = NULL, updated_at = now()
            WHERE id = \(item.id) AND state = 'pending' AND lease_owner = \(owner)
            """) == 1
    }

    /// Gives rows back untouched (a stopping job's unprocessed claims), so other workers need not wait out the lease.
    public func release(_ items: [Item]) async throws {
        guard !items.isEmpty else { return }
        try await pool.execute("""
            UPDATE baton.transfers SET lease_owner = NULL, lease_expires_at = NULL
            WHERE id = ANY(\(arrayLiteral(items.map { String($0.id) }))::bigint[]) AND lease_owner = \(owner) AND state = 'pending'
            """)
    }

    /// Makes `failed` rows of this queue pending again (`--retry-failed`); returns how many.
    public func retryFailed() async throws -> Int {
        try await makePending(from: "failed")
    }

    /// Makes `unresolvable` rows of this queue pending again (`--retry-unresolvable`), for rows refused because of
    /// a cause since fixed (a wrong target team or client ID); returns how many. Their last error stays for the report.
    public func retryUnresolvable() async throws -> Int {
        try await makePending(from: "unresolvable")
    }

    private func makePending(from state: String) async throws -> Int {
        let condition = kind == .exchange ? "transfer_sub IS NOT NULL" : "transfer_sub IS NULL"
        return try await pool.execute("""
            UPDATE baton.transfers SET state = 'pending', attempts = 0, next_attempt_at = NULL, updated_at = now()
            WHERE state = \(state) AND \(unsafeRaw: condition)
            """)
    }
}

/// Group commit of the sender job's answers (``TransferQueue/storeTransferIdentifier(_:transferSub:)``): up to
/// ``maxWriters`` statements at a time, each carrying every answer that was waiting when it started (at most
/// ``maxBatch``).
///
/// A million-user `baton transfer-ids` stored each answer with a statement of its own; PostgreSQL's work per
/// statement (the round trip, executor start and end, the CHECK constraints read again, the commit) was most of
/// its CPU there. With 32 workers, answers arrive while a statement runs, so the batches size themselves to the
/// load: one answer when the job runs at 10 requests a second, dozens when it is unthrottled. With one statement at a
/// time, an unthrottled ten-million-user rehearsal kept 1.26 of two cores busy (PostgreSQL's backend waited for the
/// next batch while the workers waited for this one); a second statement in flight runs beside it on the other core.
/// The batches' rows are distinct (a row is leased to one worker), so two statements never wait on each other.
final class TransferIdentifierWriter: Sendable {
    /// Answers per statement at most.
    static let maxBatch = 500
    /// Statements in flight at most.
    static let maxWriters = 2

    private struct Waiting {
        var id: Int64
        var transferSub: String
        var continuation: CheckedContinuation<Result<Bool, any Error>, Never>
    }

    private let pool: PostgresPool
    /// Answers not yet in a statement, and the writer tasks running.
    private let state = Mutex<(waiting: [Waiting], writers: Int)>(([], 0))

    init(pool: PostgresPool) {
        self.pool = pool
    }

    /// Stores one answer; returns whether its row was written.
    func store(id: Int64, transferSub: String) async throws -> Bool {
        let result = await withCheckedContinuation { (continuation: CheckedContinuation<Result<Bool, any Error>, Never>) in
            let start = state.withLock { state -> Bool in
                state.waiting.append(Waiting(id: id, transferSub: transferSub, continuation: continuation))
                guard state.writers < Self.maxWriters else { return false }
                state.writers += 1
                return true
            }
            if start { Task { await self.writeWhileWaiting() } }
        }
        return try result.get()
    }

    /// Writes batches until none is waiting.
    private func writeWhileWaiting() async {
        while true {
            let batch = state.withLock { state -> [Waiting] in
                guard !state.waiting.isEmpty else {
                    state.writers -= 1
                    return []
                }
                let count = min(Self.maxBatch, state.waiting.count)
                let batch = Array(state.waiting.prefix(count))
                state.waiting.removeFirst(count)
                return batch
            }
            guard !batch.isEmpty else { return }
            do {
                let rows = try await pool.query(TransferQueue.storeQuery(batch.map { ($0.id, $0.transferSub) }))
                let written = Set(try rows.map { try $0.decode(Int64.self, at: 0) })
                for answer in batch { answer.continuation.resume(returning: .success(written.contains(answer.id))) }
            } catch {
                for answer in batch { answer.continuation.resume(returning: .failure(error)) }
            }
        }
    }
}
