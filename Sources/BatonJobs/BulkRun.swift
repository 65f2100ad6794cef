import Baton
import BatonAppleSignIn
import BatonLogging
import Foundation

/// The one entry point of the bulk jobs: the step for the queue's kind, the ``BulkJob`` around it, and a run with
/// progress. `baton exchange`, `baton transfer-ids`, the demo and `baton-bench exchange` all start their jobs here.
public struct BulkRun: Sendable {
    /// What each row asks of Apple, and where the answer goes.
    public enum Work: Sendable {
        /// The recipient side: exchange transfer identifiers and apply each answer through `applier` (queue kind `.exchange`).
        case exchange(applier: any ExchangeApplier)
        /// The sender side: make transfer identifiers for `targetTeamID` (queue kind `.transferIdentifiers`).
        case transferIdentifiers(targetTeamID: String)
    }

    /// The job, for callers that stop it early or read its counters.
    public let job: BulkJob
    private let window: TransferWindow

    /// Prepares a job over `queue`.
    /// - Parameters:
    ///   - window: the transfer window; the exchange requires it open, the sender job only not closed.
    ///   - wrap: lets a caller put its own step around the standard one (the demo holds some users back).
    ///   - throttle: pauses claims while the database is busy; default none.
    /// - Throws: ``BulkJobError`` when the target team is not a team ID.
    public init(queue: TransferQueue, work: Work, client: AppleClient, options: BulkJobOptions, window: TransferWindow,
                now: @escaping @Sendable () -> Date = { Date() }, logger: Logger = .disabled(),
                wrap: (any BulkJobStep) -> any BulkJobStep = { $0 }, throttle: JobThrottle? = nil) throws {
        let step: any BulkJobStep
        switch work {
        case .exchange(let applier):
            step = ExchangeStep(client: client, applier: applier)
        case .transferIdentifiers(let targetTeamID):
            step = try TransferIdentifierStep(client: client, targetTeamID: targetTeamID, queue: queue)
        }
        let requireOpenWindow = if case .exchange = work { true } else { false }
        self.window = window
        job = BulkJob(queue: queue, step: wrap(step), options: options, window: window, requireOpenWindow: requireOpenWindow,
                      now: now, logger: logger, throttle: throttle)
    }

    /// Runs the job to its end while a ``ProgressReporter`` shows it (same parameters as the reporter's); returns
    /// the summary.
    public func run(total: Int, isTerminal: Bool = isatty(STDERR_FILENO) == 1, logInterval: Double = 5,
                    write: @escaping @Sendable (String) -> Void = { FileHandle.standardError.write(Data($0.utf8)) }) async -> BulkJobSummary {
        let reporter = ProgressReporter(total: total, counters: job.counters, window: window, isTerminal: isTerminal, logInterval: logInterval, write: write,
                                        paused: { [job] in job.pause }, throttled: { [job] in job.throttle?.status })
        reporter.start()
        let summary = await job.run()
        await reporter.finish()
        return summary
    }
}
