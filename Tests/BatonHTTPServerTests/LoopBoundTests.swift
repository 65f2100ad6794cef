import BatonConcurrency
import Foundation
import Testing

/// A value that is not `Sendable`, which a ``LoopBound`` carries anyway.
private final class Tally {
    var count = 0
}

@Suite("LoopBound: a value reached on its loop's thread only")
struct LoopBoundTests {
    @Test("the value is reached and changed on its loop's thread, wherever the box was carried")
    func onItsLoop() async throws {
        let loop = try EventLoop()
        loop.start(name: "baton.test.loop-bound")
        let bound = LoopBound(Tally(), loop: loop)
        let counts = await withCheckedContinuation { continuation in
            loop.execute {
                bound.value.count += 1
                bound.value.count += 1
                continuation.resume(returning: bound.value.count)
            }
        }
        await offPool { loop.stop() }
        #expect(counts == 2)
    }

    @Test("reaching the value on another thread stops the process")
    func offItsLoop() async {
        await #expect(processExitsWith: .signal(SIGILL)) {
            let loop = try EventLoop()
            _ = LoopBound(Tally(), loop: loop).value
        }
    }
}
