import Foundation

/// The 60-day window after the recipient accepted the transfer, as the bulk jobs see it.
///
/// Apple answers `/auth/usermigrationinfo` from acceptance to 60 days later; after that nothing can be
/// exchanged. The jobs warn when fewer than ``warningDays`` days are left and refuse to start (or stop)
/// once it has closed.
public struct TransferWindow: Sendable, Equatable {
    /// When the recipient accepted the transfer; nil before acceptance.
    public let acceptedAt: Date?
    /// Days left under which the jobs warn; default 7.
    public let warningDays: Double

    /// The window's length: 60 days.
    public static let length: TimeInterval = 60 * 86_400

    /// Creates a window from the configuration's `apple.transfer.accepted_at`.
    public init(acceptedAt: Date?, warningDays: Double = 7) {
        self.acceptedAt = acceptedAt
        self.warningDays = warningDays
    }

    /// When the window closes; nil before acceptance.
    public var closesAt: Date? { acceptedAt.map { $0.addingTimeInterval(TransferWindow.length) } }

    /// Where the window stands at a moment.
    public enum Status: Sendable, Equatable {
        /// No acceptance time is configured.
        case notAccepted
        /// Accepted in the future (the configuration says so): not open yet.
        case notOpenYet(opensIn: TimeInterval)
        /// Open, with this much time left.
        case open(remaining: TimeInterval)
        /// Open, but closing within ``TransferWindow/warningDays``.
        case closingSoon(remaining: TimeInterval)
        /// Closed this long ago.
        case closed(since: TimeInterval)
    }

    /// The status at `now`. The window includes its last instant (acceptance + 60 days).
    public func status(at now: Date) -> Status {
        guard let acceptedAt, let closesAt else { return .notAccepted }
        if now < acceptedAt { return .notOpenYet(opensIn: acceptedAt.timeIntervalSince(now)) }
        let remaining = closesAt.timeIntervalSince(now)
        if remaining < 0 { return .closed(since: -remaining) }
        return remaining < warningDays * 86_400 ? .closingSoon(remaining: remaining) : .open(remaining: remaining)
    }

    /// Whether Apple still answers at `now`.
    public func isOpen(at now: Date) -> Bool {
        switch status(at: now) {
        case .open, .closingSoon: true
        case .notAccepted, .notOpenYet, .closed: false
        }
    }

    /// `3 days 4 hours`, `5 hours 12 minutes`, `42 seconds`: a duration for messages.
    public static func describe(_ seconds: TimeInterval) -> String {
        let total = Int(max(0, seconds).rounded(.down))
        let days = total / 86_400, hours = total % 86_400 / 3600, minutes = total % 3600 / 60
        func unit(_ n: Int, _ name: String) -> String { "\(n) \(name)\(n == 1 ? "" : "s")" }
        if days > 0 { return "\(unit(days, "day")) \(unit(hours, "hour"))" }
        if hours > 0 { return "\(unit(hours, "hour")) \(unit(minutes, "minute"))" }
        if minutes > 0 { return "\(unit(minutes, "minute")) \(unit(total % 60, "second"))" }
        return unit(total, "second")
    }
}
