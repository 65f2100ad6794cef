import Dispatch
import BatonLogging
import Foundation

/// Suspends until the process receives SIGINT or SIGTERM; returns the signal number.
package func waitForTerminationSignal() async -> Int32 {
    await withCheckedContinuation { (continuation: CheckedContinuation<Int32, Never>) in
        let queue = DispatchQueue(label: "baton.signals")
        let resumed = SignalLatch(continuation)
        for number in [SIGINT, SIGTERM] {
            signal(number, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: number, queue: queue)
            source.setEventHandler { resumed.fire(number) }
            source.resume()
            resumed.keep(source)
        }
    }
}

/// Prints `announcement` on standard output (the server is ready), waits for SIGINT or SIGTERM, then logs the
/// signal and stops the server; returns exit code 0. Each SIGHUP meanwhile runs `hangUp` (one at a time, in order).
package func serveUntilTerminated(announcing announcement: String, logger: Logger, hangUp: @escaping @Sendable () async -> Void = {},
                                  stop: () async -> Void) async -> Int32 {
    let hangUps = onHangUp(hangUp)
    defer { hangUps.cancel() }
    FileHandle.standardOutput.write(Data((announcement + "\n").utf8))
    let signal = await waitForTerminationSignal()
    logger.info("stopping", ["signal": String(signal)])
    await stop()
    return 0
}

/// Runs `body` for each SIGHUP the process receives until the returned source is cancelled; SIGHUP no longer ends
/// the process meanwhile. The runs are queued, one after the other, on a task of their own.
package func onHangUp(_ body: @escaping @Sendable () async -> Void) -> any DispatchSourceSignal {
    let (signals, continuation) = AsyncStream.makeStream(of: Void.self)
    Task {
        for await _ in signals { await body() }
    }
    signal(SIGHUP, SIG_IGN)
    let source = DispatchSource.makeSignalSource(signal: SIGHUP, queue: DispatchQueue(label: "baton.signals.hangup"))
    source.setEventHandler { continuation.yield() }
    source.setCancelHandler { continuation.finish() }
    source.resume()
    return source
}

/// Resumes a continuation once, from the signal queue, and keeps the signal sources alive.
private final class SignalLatch: @unchecked Sendable {
    // Only touched on the serial signal queue (and during setup, before any signal can fire there).
    private var continuation: CheckedContinuation<Int32, Never>?
    private var sources: [any DispatchSourceSignal] = []

    init(_ continuation: CheckedContinuation<Int32, Never>) { self.continuation = continuation }

    func keep(_ source: any DispatchSourceSignal) { sources.append(source) }

    func fire(_ number: Int32) {
        continuation?.resume(returning: number)
        continuation = nil
    }
}
