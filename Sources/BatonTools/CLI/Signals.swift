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
/// signal and stops the server; returns exit code 0.
package func serveUntilTerminated(announcing announcement: String, logger: Logger, stop: () async -> Void) async -> Int32 {
    FileHandle.standardOutput.write(Data((announcement + "\n").utf8))
    let signal = await waitForTerminationSignal()
    logger.info("stopping", ["signal": String(signal)])
    await stop()
    return 0
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
