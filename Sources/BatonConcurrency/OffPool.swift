import Dispatch

/// Runs blocking work (a libpq or libmicrohttpd call, a file or pipe read, CPU-heavy key generation) on
/// `queue` and suspends until it is done, so Swift's cooperative pool never blocks.
///
/// A serial `queue` also orders the calls (a connection's own queue); the default is a global queue.
/// The error type of `body` is kept: non-throwing work gives a non-throwing call.
package func offPool<T: Sendable, Failure: Error>(
    on queue: DispatchQueue = .global(),
    _ body: @escaping @Sendable () throws(Failure) -> T
) async throws(Failure) -> T {
    let result: Result<T, Failure> = await withCheckedContinuation { continuation in
        queue.async { continuation.resume(returning: Result { () throws(Failure) -> T in try body() }) }
    }
    return try result.get()
}
