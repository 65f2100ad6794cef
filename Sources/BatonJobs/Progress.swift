import Baton
import Foundation
import Synchronization

/// Counts a running job's outcomes; shared by its workers.
public final class JobCounters: Sendable {
    /// A consistent copy of the counts.
    public struct Snapshot: Sendable, Equatable {
        /// Users finished successfully in this run (exchanged, or given a transfer identifier).
        public var succeeded = 0
        /// Users recorded as unresolvable in this run (Apple refused them for good: revoked, unknown).
        public var unresolvable = 0
        /// Users whose attempt failed in this run (deferred for a retry, or failed for good).
        public var failed = 0
        /// Of ``failed``, the users whose last attempt failed, so their row is now `failed` for good.
        public var failedForGood = 0
        /// Users another worker or process had already finished when this one applied its answer.
        public var alreadyDone = 0
        /// Requests Apple answered with 429.
        public var rateLimited = 0
        /// Requests sent to Apple.
        public var requests = 0

        /// Users this run finished one way or another.
        public var processed: Int { succeeded + unresolvable + failed + alreadyDone }
        /// Users that did not end well.
        public var errors: Int { unresolvable + failed }
    }

    private let state = Mutex(Snapshot())

    /// Zero counts.
    public init() {}

    /// Changes the counts.
    public func update(_ body: (inout Snapshot) -> Void) { state.withLock { body(&$0) } }

    /// The counts now.
    public var snapshot: Snapshot { state.withLock { $0 } }
}

/// Formats a job's progress: a bar for a terminal, a key=value line for logs. Pure.
public struct ProgressFormatter: Sendable {
    /// Users to do when the run started.
    public var total: Int
    /// The bar's width in characters; default 30.
    public var barWidth = 30
    /// The transfer's 60-day window: when set and open, the ETA says whether the job ends before or after
    /// day 60; default nil (no window text).
    public var window: TransferWindow?

    /// Creates a formatter for `total` users.
    public init(total: Int, window: TransferWindow? = nil) {
        self.total = total
        self.window = window
    }

    /// Users finished per second over the run, and the estimated seconds left (nil when unknown). `elapsed` is the
    /// wall-clock time since the job started, time spent throttled included, so the estimate (and the day-60
    /// projection from it) counts the job's yielding at the share it has had so far.
    public func rates(_ counts: JobCounters.Snapshot, elapsed: TimeInterval) -> (perSecond: Double, secondsLeft: Double?) {
        let perSecond = elapsed > 0 ? Double(counts.processed) / elapsed : 0
        let left = max(0, total - counts.processed)
        return (perSecond, perSecond > 0 ? Double(left) / perSecond : (left == 0 ? 0 : nil))
    }

    /// Where an estimated end lands in the window: its day (1 on the acceptance day, as the report counts)
    /// and whether it comes before the window closes at the end of day 60.
    public struct WindowLanding: Sendable, Equatable {
        /// The day of the window the job would end on; above 60 when it ends after the window closed.
        public var day: Int
        /// Whether the job ends while Apple still answers (at or before acceptance + 60 days).
        public var beforeDeadline: Bool
    }

    /// Where a job ending `secondsLeft` after `now` lands in ``window``; nil without a window, before
    /// acceptance, or once the window has closed (the job stops then).
    public func landing(secondsLeft: TimeInterval, now: Date) -> WindowLanding? {
        guard let window, let accepted = window.acceptedAt, let closes = window.closesAt, now >= accepted, now <= closes else { return nil }
        let end = now.addingTimeInterval(secondsLeft)
        let before = end <= closes
        let day = Int((end.timeIntervalSince(accepted) / 86_400).rounded(.down)) + 1
        return WindowLanding(day: before ? min(60, day) : max(61, day), beforeDeadline: before)
    }

    /// `[#########.....................] 1200/4000 30% 198.5/s errors 3 left 14 seconds, by day 12: before day 60`
    ///
    /// The part after the ETA appears with an open ``window``: `after day 60` warns that at this rate the
    /// job would still be running when Apple stops answering. While the job is `paused` for Apple, the line
    /// ends with `paused: apple unreachable for 42 s (limit 3600 s)`.
    /// While the job is `throttled`, the reason follows (`throttled: replica lag 3.2 s > 1 s (standby)`).
    public func bar(_ counts: JobCounters.Snapshot, elapsed: TimeInterval, now: Date = Date(), paused: BulkJobPause? = nil, throttled: String? = nil) -> String {
        let done = min(counts.processed, total)
        let fraction = total > 0 ? Double(done) / Double(total) : 1
        let filled = Int((fraction * Double(barWidth)).rounded(.down))
        let (perSecond, left) = rates(counts, elapsed: elapsed)
        let bar = String(repeating: "#", count: filled) + String(repeating: ".", count: barWidth - filled)
        var leftText = left.map { TransferWindow.describe($0) } ?? "?"
        if let left, let landing = landing(secondsLeft: left, now: now) {
            leftText += ", by day \(landing.day): \(landing.beforeDeadline ? "before" : "after") day 60"
        }
        let pausedText = paused.map { " paused: apple unreachable for \(Int($0.seconds)) s (limit \(Int($0.limit)) s)" } ?? ""
        return "[\(bar)] \(done)/\(total) \(Int((fraction * 100).rounded(.down)))% \(String(format: "%.1f", perSecond))/s errors \(counts.errors) left \(leftText)\(pausedText)\(throttled.map { " " + $0 } ?? "")"
    }

    /// `progress done=1200 total=4000 rate_per_s=198.5 errors=3 rate_limited=0 eta_s=14`, then with an open
    /// ``window`` ` eta_day=12 eta_before_day_60=true`, and while `paused` for Apple
    /// ` paused=apple_unreachable paused_s=42 pause_limit_s=3600`.
    /// While the job is `throttled`, ` throttled="throttled: replica lag 3.2 s > 1 s (standby)"` follows.
    public func logLine(_ counts: JobCounters.Snapshot, elapsed: TimeInterval, now: Date = Date(), paused: BulkJobPause? = nil, throttled: String? = nil) -> String {
        let (perSecond, left) = rates(counts, elapsed: elapsed)
        var line = "progress done=\(counts.processed) total=\(total) rate_per_s=\(String(format: "%.1f", perSecond)) errors=\(counts.errors) rate_limited=\(counts.rateLimited) eta_s=\(left.map { String(Int($0.rounded())) } ?? "unknown")"
        if let left, let landing = landing(secondsLeft: left, now: now) {
            line += " eta_day=\(landing.day) eta_before_day_60=\(landing.beforeDeadline)"
        }
        if let paused { line += " paused=apple_unreachable paused_s=\(Int(paused.seconds)) pause_limit_s=\(Int(paused.limit))" }
        if let throttled { line += " throttled=\"\(throttled)\"" }
        return line
    }
}

/// Prints a job's progress while it runs: a bar redrawn in place on a terminal (several times a second), or a
/// log line every few seconds otherwise. Writes to `write` (standard error by default).
public final class ProgressReporter: Sendable {
    private let formatter: ProgressFormatter
    private let counters: JobCounters
    private let isTerminal: Bool
    private let interval: Duration
    private let write: @Sendable (String) -> Void
    private let paused: @Sendable () -> BulkJobPause?
    private let throttled: @Sendable () -> String?
    private let started = ContinuousClock.now
    private let task = Mutex<Task<Void, Never>?>(nil)

    /// Creates a reporter.
    /// - Parameters:
    ///   - window: the transfer's window, so the ETA says whether it lands before or after day 60; default nil.
    ///   - isTerminal: draw a bar (true) or print log lines (false); default: whether standard error is a terminal.
    ///   - logInterval: seconds between log lines; default 5.
    ///   - paused: the job's pause while Apple is unreachable (``BulkJob/pause``), shown on the line; default none.
    ///   - throttled: why the job is throttled (``JobThrottle/reason``), shown on the line; default none.
    public init(total: Int, counters: JobCounters, window: TransferWindow? = nil, isTerminal: Bool = isatty(STDERR_FILENO) == 1, logInterval: Double = 5,
                write: @escaping @Sendable (String) -> Void = { FileHandle.standardError.write(Data($0.utf8)) },
                paused: @escaping @Sendable () -> BulkJobPause? = { nil }, throttled: @escaping @Sendable () -> String? = { nil }) {
        formatter = ProgressFormatter(total: total, window: window)
        self.counters = counters
        self.isTerminal = isTerminal
        interval = isTerminal ? .milliseconds(250) : .milliseconds(Int64(logInterval * 1000))
        self.write = write
        self.paused = paused
        self.throttled = throttled
    }

    private var elapsed: TimeInterval {
        let duration = ContinuousClock.now - started
        return Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
    }

    /// Starts printing.
    public func start() {
        let task = Task { [self] in
            while !Task.isCancelled {
                try? await Task.sleep(for: interval)
                if Task.isCancelled { break }
                draw()
            }
        }
        self.task.withLock { $0 = task }
    }

    private func draw() {
        if isTerminal {
            write("\r" + formatter.bar(counters.snapshot, elapsed: elapsed, paused: paused(), throttled: throttled()) + "\u{1B}[K")
        } else {
            write(formatter.logLine(counters.snapshot, elapsed: elapsed, paused: paused(), throttled: throttled()) + "\n")
        }
    }

    /// Stops printing, after a last bar (ended by a newline) on a terminal.
    public func finish() async {
        let task = self.task.withLock { task in
            defer { task = nil }
            return task
        }
        task?.cancel()
        await task?.value
        if isTerminal {
            draw()
            write("\n")
        }
    }
}
