import Baton
import BatonJobs
import BatonConcurrency
import Foundation
import Synchronization

/// `--metrics-file PATH` of `baton exchange` and `baton transfer-ids`: the job's state in Prometheus' text format
/// for node_exporter's textfile collector, rewritten every `interval` while the job runs and once at its end
/// (to a temporary file beside it, then renamed, so the collector never reads half a file).
///
/// The label is `command`, not `job`: Prometheus sets `job` itself on every series it scrapes.
final class JobMetricsFile: Sendable {
    private let path: String
    private let command: String
    private let total: Int
    private let job: BulkJob
    private let interval: Duration
    private let state = Mutex(State())

    private struct State {
        var task: Task<Void, Never>?
        var lastDone = 0
        var lastProgress = Date()
    }

    /// - Parameters:
    ///   - total: the users pending when the job starts (``baton_job_remaining`` counts down from it).
    ///   - interval: time between rewrites; default 5 s.
    init(path: String, command: String, total: Int, job: BulkJob, interval: Duration = .seconds(5)) {
        self.path = path
        self.command = command
        self.total = total
        self.job = job
        self.interval = interval
    }

    /// Writes the file (running) and keeps rewriting it.
    func start() async throws {
        try await write(running: true, remaining: nil)
        let task = Task { [self] in
            while (try? await Task.sleep(for: interval)) != nil {
                try? await write(running: true, remaining: nil)
            }
        }
        state.withLock { $0.task = task }
    }

    /// Stops the rewrites and writes the job's end: not running, with the remaining users the job counted.
    func finish(_ summary: BulkJobSummary) async throws {
        let task = state.withLock { state in
            defer { state.task = nil }
            return state.task
        }
        task?.cancel()
        await task?.value
        try await write(running: false, remaining: summary.remaining)
    }

    private func write(running: Bool, remaining: Int?) async throws {
        let text = render(running: running, remaining: remaining)
        let path = self.path
        try await offPool {
            let temporary = path + ".\(getpid()).tmp"
            try Data(text.utf8).write(to: URL(fileURLWithPath: temporary))
            guard rename(temporary, path) == 0 else {
                let error = CocoaError(.fileWriteUnknown, userInfo: [NSFilePathErrorKey: path, NSUnderlyingErrorKey: POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO)])
                unlink(temporary)
                throw error
            }
        }
    }

    /// The exposition: whether the job runs, when it last finished a user, whether it is paused while Apple
    /// answers no one, users done by outcome, users left, Apple's 429 answers, and the time the job spent throttled
    /// and whether it is now (by the limit crossed).
    private func render(running: Bool, remaining: Int?) -> String {
        let counts = job.counters.snapshot
        let now = Date()
        let lastProgress = state.withLock { state in
            if counts.processed != state.lastDone {
                state.lastDone = counts.processed
                state.lastProgress = now
            }
            return state.lastProgress
        }
        let label = "command=\"\(command)\""
        var out = "# HELP baton_job_running Whether the bulk job runs: 1 yes, 0 ended.\n# TYPE baton_job_running gauge\n"
        out += "baton_job_running{\(label)} \(running ? 1 : 0)\n"
        out += "# HELP baton_job_last_progress_timestamp_seconds When the job last finished a user (its start before the first).\n# TYPE baton_job_last_progress_timestamp_seconds gauge\n"
        out += "baton_job_last_progress_timestamp_seconds{\(label)} \(Int(lastProgress.timeIntervalSince1970))\n"
        out += "# HELP baton_job_paused Whether the job is paused: 1 yes, 0 no; apple_unreachable while Apple answers no one (or only 429s).\n# TYPE baton_job_paused gauge\n"
        out += "baton_job_paused{\(label),reason=\"apple_unreachable\"} \(running && job.pause != nil ? 1 : 0)\n"
        out += "# HELP baton_job_done_total Users the job finished in this run, by outcome.\n# TYPE baton_job_done_total counter\n"
        for (outcome, count) in [("already_done", counts.alreadyDone), ("failed", counts.failed), ("succeeded", counts.succeeded), ("unresolvable", counts.unresolvable)] {
            out += "baton_job_done_total{\(label),outcome=\"\(outcome)\"} \(count)\n"
        }
        out += "# HELP baton_job_remaining Users left to do: pending at the start less those done (the queue's count at the end).\n# TYPE baton_job_remaining gauge\n"
        out += "baton_job_remaining{\(label)} \(remaining ?? max(0, total - counts.processed))\n"
        out += "# HELP baton_job_rate_limited_total Requests Apple answered with 429 in this run.\n# TYPE baton_job_rate_limited_total counter\n"
        out += "baton_job_rate_limited_total{\(label)} \(counts.rateLimited)\n"
        out += "# HELP baton_job_throttled_seconds_total Seconds the job claimed nothing new because the database was busy (--max-replica-lag, --max-active-backends).\n# TYPE baton_job_throttled_seconds_total counter\n"
        out += "baton_job_throttled_seconds_total{\(label)} \(String(format: "%.1f", job.throttle?.throttledSeconds ?? 0))\n"
        out += "# HELP baton_job_throttled Whether the job is throttled now, by the limit crossed: 1 yes, 0 no.\n# TYPE baton_job_throttled gauge\n"
        let signal = running ? job.throttle?.signal : nil
        for reason in ThrottleSignal.allCases {
            out += "baton_job_throttled{\(label),reason=\"\(reason.rawValue)\"} \(signal == reason ? 1 : 0)\n"
        }
        return out
    }
}
