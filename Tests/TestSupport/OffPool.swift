import Dispatch

/// Runs blocking work (a child process, a pipe read) on a Dispatch thread, never on Swift's
/// cooperative pool, which in-process servers of other suites need to answer their requests.
public func offPool<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
    try await withCheckedThrowingContinuation { continuation in
        DispatchQueue.global().async { continuation.resume(with: Result { try body() }) }
    }
}
