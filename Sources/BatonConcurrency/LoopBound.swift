/// A value that belongs to one ``EventLoop``: the box may be carried to any thread (it is `Sendable`), the value is
/// read and changed only on the loop's thread, which every access checks (a `precondition`, not a lookup that
/// decides anything). What `@unchecked Sendable` plus a comment used to promise, the type now says and checks.
///
/// The loop is given where the value is made (where the connection or the daemon arrives), never looked up.
package final class LoopBound<Value>: @unchecked Sendable {
    // `@unchecked Sendable`: `stored` is touched only on `loop`'s thread, which every accessor checks.
    /// The loop the value belongs to.
    package let loop: EventLoop
    private var stored: Value

    /// Binds `value` to `loop`; callable from any thread (nothing touches the value until it is used on the loop).
    package init(_ value: Value, loop: EventLoop) {
        self.loop = loop
        stored = value
    }

    /// The value; read and set on the loop's thread only.
    package var value: Value {
        get {
            checkOnLoop()
            return stored
        }
        set {
            checkOnLoop()
            stored = newValue
        }
    }

    /// Runs `body` with the value in place (no copy of what it holds), on the loop's thread only.
    package func withValue<T>(_ body: (inout Value) throws -> T) rethrows -> T {
        checkOnLoop()
        return try body(&stored)
    }

    private func checkOnLoop() {
        precondition(EventLoop.current === loop, "a loop-bound value is used on its own loop's thread only")
    }
}
