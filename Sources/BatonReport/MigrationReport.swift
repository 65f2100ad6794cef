import Baton
import Foundation

/// The correlation report: where a transfer's users stand, how they moved, and whether the rest will make
/// it before the 60-day window closes.
///
/// Built by ``ReportBuilder`` from aggregate queries; rendered by ``renderTable()``, ``renderCSV()``,
/// ``renderJSON()`` and ``renderHTML()``. Encodes to JSON with snake_case keys and ISO 8601 dates (the shape
/// of `GET /v1/report`).
public struct MigrationReport: Sendable, Equatable, Codable {
    /// The instant the report describes (the builder's injected clock).
    public var generatedAt: Date
    /// The 60-day window after the recipient accepted the transfer.
    public var window: Window
    /// Users by state.
    public var totals: Totals
    /// Users refused for good, by the step that refused them; the projection leaves them out.
    public var refused: Refused
    /// Migrated users by how they were carried over.
    public var methods: [MethodOutcome]
    /// Migrations per UTC day, by method, from the first day with a migration (or the acceptance day) to today.
    public var perDay: [DayCount]
    /// The current pace and where it leads.
    public var projection: Projection
    /// Why users are failed, unresolvable or still retrying, most frequent first.
    public var failures: Failures
    /// Users not migrated: the list for a re-sign-in campaign (possibly one page of it).
    public var unresolved: UnresolvedList
    /// Second records made under the new identifier during the cutover (``Duplicates``).
    public var duplicates = Duplicates()

    /// The 60-day window.
    public struct Window: Sendable, Equatable, Codable {
        /// When the recipient accepted the transfer; nil when not configured (no window figures then).
        public var acceptedAt: Date?
        /// `acceptedAt` + 60 days.
        public var endsAt: Date?
        /// Whole days elapsed since acceptance (rounded down, 0 before it).
        public var daysElapsed: Int?
        /// Whole days left until ``endsAt`` (rounded down, 0 once closed).
        public var daysLeft: Int?
        /// Whether the window has closed: transfer identifiers can no longer be exchanged.
        public var closed: Bool

        /// Creates the window figures for `acceptedAt` at `now`.
        public init(acceptedAt: Date?, now: Date) {
            self.acceptedAt = acceptedAt
            guard let acceptedAt else {
                endsAt = nil
                daysElapsed = nil
                daysLeft = nil
                closed = false
                return
            }
            let end = acceptedAt.addingTimeInterval(BatonConfiguration.Transfer.window)
            endsAt = end
            daysElapsed = max(0, Int((now.timeIntervalSince(acceptedAt) / 86_400).rounded(.down)))
            daysLeft = max(0, Int((end.timeIntervalSince(now) / 86_400).rounded(.down)))
            closed = now >= end
        }
    }

    /// Counts by state.
    public struct Totals: Sendable, Equatable, Codable {
        /// Every user in `baton.transfers`.
        public var total: Int
        /// Carried over to the recipient team's identifier.
        public var migrated: Int
        /// Not yet carried over; sign-in or the exchange may still do it.
        public var pending: Int
        /// The last attempt failed with an error that stops retries.
        public var failed: Int
        /// Apple cannot resolve the user (no transfer identifier, or the exchange found nobody).
        public var unresolvable: Int

        /// Sign-ins whose `transfer_sub` led to no record (answered `unmatched`), counted once per transfer
        /// identifier still not migrated; not part of ``total``. `/v1/link` is their way out.
        public var unmatchedSignins: Int

        /// Creates totals; ``total`` is the sum of the four states.
        public init(migrated: Int, pending: Int, failed: Int, unresolvable: Int, unmatchedSignins: Int = 0) {
            self.migrated = migrated
            self.pending = pending
            self.failed = failed
            self.unresolvable = unresolvable
            self.unmatchedSignins = unmatchedSignins
            total = migrated + pending + failed + unresolvable
        }

        /// Users not migrated: pending, failed and unresolvable.
        public var unresolved: Int { pending + failed + unresolvable }

        /// Users who can still migrate: pending and failed (a sign-in, or a rerun with `--retry-failed`, may
        /// still carry them over); unresolvable users were refused for good.
        public var migratable: Int { pending + failed }

        /// The migrated share, 0...1 (0 for an empty table).
        public var migratedFraction: Double { total == 0 ? 0 : Double(migrated) / Double(total) }
    }

    /// How users were carried over.
    public enum Method: String, Sendable, Equatable, Codable, CaseIterable {
        /// The user signed in and the identity token's `transfer_sub` matched (passive migration).
        case signin
        /// The recipient exchanged the transfer identifier in bulk (active migration).
        case exchange
        /// The user proved both identities with an old-team and a new-team token (re-link).
        case link

        /// A label for people: `sign-in`, `exchange`, `link`.
        public var label: String {
            switch self {
            case .signin: "sign-in"
            case .exchange: "exchange"
            case .link: "link"
            }
        }
    }

    /// The users one method migrated.
    public struct MethodOutcome: Sendable, Equatable, Codable {
        /// The method.
        public var method: Method
        /// Users it migrated.
        public var migrated: Int
    }

    /// The bulk step a user not migrated waits for, or was refused at: told by whether the user's
    /// `baton.transfers` row holds a transfer identifier.
    public enum Step: String, Sendable, Equatable, Codable, CaseIterable {
        /// `baton transfer-ids` (the sending team): no transfer identifier yet.
        case transferIdentifiers = "transfer-ids"
        /// `baton exchange` (the receiving team): a transfer identifier to exchange.
        case exchange
    }

    /// Users refused for good, by the step that refused them. ``transferIdentifiers`` and ``exchange`` add up to
    /// ``Totals/unresolvable``; ``signin`` counts sign-ins, not users of ``Totals/total``.
    public struct Refused: Sendable, Equatable, Codable {
        /// Refused at `baton transfer-ids`: Apple made no transfer identifier (`last_error` says why;
        /// `invalid_request` when the user revoked the app or is not the team's user of it), so the exchange has
        /// nothing to exchange and the user's sign-ins carry a `transfer_sub` that leads to no record.
        public var transferIdentifiers: Int
        /// Refused at `baton exchange`: Apple would not exchange the transfer identifier, no record carries the
        /// old identifier, or the new one belongs to another record (`last_error` says which).
        public var exchange: Int
        /// Sign-ins answered `unmatched`: their `transfer_sub` leads to no record (``Totals/unmatchedSignins``).
        public var signin: Int

        /// Creates the counts.
        public init(transferIdentifiers: Int, exchange: Int, signin: Int) {
            self.transferIdentifiers = transferIdentifiers
            self.exchange = exchange
            self.signin = signin
        }

        /// Whether anything was refused.
        public var isEmpty: Bool { transferIdentifiers + exchange + signin == 0 }
    }

    /// Migrations on one UTC day.
    public struct DayCount: Sendable, Equatable, Codable {
        /// The day, `YYYY-MM-DD` in UTC.
        public var day: String
        /// Migrated by sign-in that day.
        public var signin: Int = 0
        /// Migrated by exchange that day.
        public var exchange: Int = 0
        /// Migrated by re-link that day.
        public var link: Int = 0

        /// Every migration that day.
        public var total: Int { signin + exchange + link }
    }

    /// The pace of migrations and the finish it leads to.
    public struct Projection: Sendable, Equatable, Codable {
        /// Where the current pace leads.
        public enum Status: String, Sendable, Equatable, Codable {
            /// Nobody is left to migrate.
            case complete
            /// Everybody left migrates before the window closes at the current pace.
            case onTrack = "on_track"
            /// At the current pace the rest migrate only after the window closes.
            case behind
            /// No migration during the pace period: no finish can be projected.
            case stalled
        }

        /// Where the current pace leads.
        public var status: Status
        /// Migrations per day over the pace period.
        public var perDay: Double
        /// Migrations counted over the pace period.
        public var migratedInPeriod: Int
        /// Length of the pace period in days: the last 7 days, or the time since acceptance when shorter
        /// (counted as at least one day).
        public var periodDays: Double
        /// Users who can still migrate (pending and failed; refused users are left out).
        public var remaining: Int
        /// When the last of them would migrate at the current pace; nil when complete or stalled.
        public var finishAt: Date?
        /// Migrations per day needed from now to finish when the window closes; nil without a window or
        /// once it has closed.
        public var requiredPerDay: Double?
    }

    /// Failures grouped by reason.
    public struct Failures: Sendable, Equatable, Codable {
        /// The most frequent reasons, most frequent first.
        public var reasons: [ReasonCount]
        /// Reasons left out of ``reasons`` (there were more distinct ones than the report lists).
        public var omittedReasons: Int
    }

    /// How many users in one state share one last error.
    public struct ReasonCount: Sendable, Equatable, Codable {
        /// `failed`, `unresolvable`, or `pending` (retrying after an error).
        public var state: String
        /// The last error recorded (`baton.transfers.last_error`), or `no error recorded`.
        public var reason: String
        /// Users in that state with that error.
        public var count: Int
    }

    /// The users not migrated, in `old_sub` order: everybody, or one page of them.
    public struct UnresolvedList: Sendable, Equatable, Codable {
        /// Every user not migrated (the same as ``Totals/unresolved``).
        public var total: Int
        /// The users listed (a page of at most the builder's limit).
        public var users: [UnresolvedUser]
        /// The `old_sub` to pass as the builder's `after` for the next page; nil on the last page.
        public var nextAfter: String?
    }

    /// One user not migrated.
    public struct UnresolvedUser: Sendable, Equatable, Codable {
        /// The application's key for the user (the legacy table's key column, as text); nil when no legacy
        /// row carries `oldSub` (or no legacy table is configured).
        public var legacyKey: String?
        /// The sending team's identifier.
        public var oldSub: String
        /// `pending`, `failed` or `unresolvable`.
        public var state: String
        /// The step the user waits for or, when `unresolvable`, was refused at.
        public var step: Step
        /// Exchange attempts so far.
        public var attempts: Int
        /// The last error recorded, if any.
        public var lastError: String?
        /// The legacy row's email: masked (`j***@example.com`) unless the builder was asked for addresses.
        public var email: String?
        /// Whether the email is an Apple private relay address, which the sending team's relay may no
        /// longer forward once the app has moved.
        public var privateRelay: Bool
    }
}
