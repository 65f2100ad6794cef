import Baton
import Synchronization

/// `/readyz`'s answer, refreshed in the background: one database check per `interval` whatever the request
/// rate, so readiness probes never take a pool connection each (a flood of them cannot starve sign-ins).
///
/// A check that has not answered within `timeout` counts as not ready (a hung primary), and the loop starts
/// on the first request, so an API used in process needs no start call.
final class ReadinessMonitor: Sendable {
    private let engine: BatonEngine
    private let interval: Duration
    private let timeout: Duration
    private let state = Mutex(State())

    private struct State {
        var latest: BatonEngine.Readiness?
        var loop: Task<Void, Never>?
        var waiters: [CheckedContinuation<BatonEngine.Readiness, Never>] = []
        var stopped = false
    }

    /// - Parameters:
    ///   - interval: time between checks; default 0.5 s.
    ///   - timeout: the longest a check may take before it counts as not ready; default 5 s.
    init(engine: BatonEngine, interval: Duration = .milliseconds(500), timeout: Duration = .seconds(5)) {
        self.engine = engine
        self.interval = interval
        self.timeout = timeout
    }

    /// The latest result; the first call starts the loop and waits for its first check.
    func current() async -> BatonEngine.Readiness {
        if let latest = state.withLock({ $0.latest }) { return latest }
        return await withCheckedContinuation { continuation in
            state.withLock { state in
                if let latest = state.latest { return continuation.resume(returning: latest) }
                state.waiters.append(continuation)
                if state.loop == nil, !state.stopped { state.loop = Task { [self] in await run() } }
            }
        }
    }

    /// Stops the loop (the server's shutdown).
    func stop() {
        let loop = state.withLock { state -> Task<Void, Never>? in
            state.stopped = true
            defer { state.loop = nil }
            return state.loop
        }
        loop?.cancel()
    }

    private func run() async {
        while !Task.isCancelled {
            let result = await check()
            let waiters = state.withLock { state -> [CheckedContinuation<BatonEngine.Readiness, Never>] in
                state.latest = result
                defer { state.waiters.removeAll() }
                return state.waiters
            }
            for waiter in waiters { waiter.resume(returning: result) }
            try? await Task.sleep(for: interval)
        }
    }

    /// One check, or not ready once `timeout` passes (the check itself then finishes on its own).
    private func check() async -> BatonEngine.Readiness {
        let answer = Mutex<CheckedContinuation<BatonEngine.Readiness, Never>?>(nil)
        return await withCheckedContinuation { continuation in
            answer.withLock { $0 = continuation }
            let finish: @Sendable (BatonEngine.Readiness) -> Void = { result in
                answer.withLock { pending in
                    pending?.resume(returning: result)
                    pending = nil
                }
            }
            let keys = state.withLock { $0.latest?.keys } ?? false
            let timer = Task { [timeout] in
                guard (try? await Task.sleep(for: timeout)) != nil else { return }
                finish(BatonEngine.Readiness(database: false, keys: keys))
            }
            Task { [engine] in
                finish(await engine.readiness())
                timer.cancel()
            }
        }
    }
}
