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

/// A result a thread that may block computed at once, or the async work that computes it when it could not
/// (it would have had to wait for something only an async caller may wait for: a key fetch, a busy pool).
package enum NowOrLater<Value: Sendable>: Sendable {
    /// The value, computed on the calling thread.
    case now(Value)
    /// The work to run on a task instead.
    case later(@Sendable () async throws -> Value)

    /// The same with `transform` applied to the value, now or later.
    package func map<Other: Sendable>(_ transform: @escaping @Sendable (Value) throws -> Other) rethrows -> NowOrLater<Other> {
        switch self {
        case .now(let value): return .now(try transform(value))
        case .later(let work): return .later { try transform(try await work()) }
        }
    }
}
