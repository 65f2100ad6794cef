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
/// (it would have had to wait for something only an async caller may wait for: a key fetch, a busy pool), or work
/// started on the calling thread's ``EventLoop`` that reports back there.
package enum NowOrLater<Value: Sendable>: Sendable {
    /// What a ``soon(_:)`` step came to, handed to the callback it was started with.
    package typealias Delivery = @Sendable (Result<NowOrLater<Value>, any Error>) -> Void

    /// The value, computed on the calling thread.
    case now(Value)
    /// The work to run on a task instead.
    case later(@Sendable () async throws -> Value)
    /// Work to start on the calling thread's event loop: call it once with the callback that receives, on that
    /// loop's thread, what the work came to (a value, async work still to run, or a further step on the loop).
    case soon(@Sendable (_ deliver: @escaping Delivery) -> Void)

    /// The value, waited for when it is not there yet: the work run on the calling task, a ``soon(_:)`` step's
    /// delivery awaited (it comes on the loop's thread, which the wait never blocks).
    package var value: Value {
        get async throws {
            switch self {
            case .now(let value): return value
            case .later(let work): return try await work()
            case .soon(let start):
                let next: NowOrLater<Value> = try await withCheckedThrowingContinuation { continuation in start { continuation.resume(with: $0) } }
                return try await next.value
            }
        }
    }

    /// The same with `transform` applied to the value, now or later.
    package func map<Other: Sendable>(_ transform: @escaping @Sendable (Value) throws -> Other) rethrows -> NowOrLater<Other> {
        switch self {
        case .now(let value): return .now(try transform(value))
        case .later(let work): return .later { try transform(try await work()) }
        case .soon(let start):
            return .soon { deliver in
                start { outcome in deliver(outcome.flatMap { next in Result { try next.map(transform) } }) }
            }
        }
    }

    /// The same with `settle` turning the work's outcome, its value or its error, into the final value, now or
    /// later; the result never fails.
    package func settled<Other: Sendable>(_ settle: @escaping @Sendable (Result<Value, any Error>) -> Other) -> NowOrLater<Other> {
        switch self {
        case .now(let value): return .now(settle(.success(value)))
        case .later(let work):
            return .later {
                do {
                    return settle(.success(try await work()))
                } catch {
                    return settle(.failure(error))
                }
            }
        case .soon(let start):
            return .soon { deliver in
                start { outcome in
                    switch outcome {
                    case .success(let next): deliver(.success(next.settled(settle)))
                    case .failure(let error): deliver(.success(.now(settle(.failure(error)))))
                    }
                }
            }
        }
    }
}
