internal import CBatonEpoll
import Foundation
import Synchronization

/// One thread's readiness loop on epoll, for work that should batch instead of waking a thread per request: an
/// HTTP server's sockets and a database connection in pipeline mode share one thread, which sleeps only when none
/// of them has anything to do.
///
/// A round: wait for ready descriptors (or a timeout), call their handlers, run the work other threads handed over
/// with ``execute(_:)``, then the end-of-round hooks (where what the round queued is flushed in one write). Handlers
/// and hooks run on the loop's thread and must not block. Everything except ``execute(_:)`` and ``stop()`` is called
/// on that thread.
package final class EventLoop: @unchecked Sendable {
    // `@unchecked Sendable`: the handler table, hooks and locals are touched only on the loop's thread; the work
    // handed over from other threads sits behind a Mutex, and the descriptors are plain integers.
    private let epoll: Int32
    private let wakeup: Int32
    private var handlers: [Int32: (_ readable: Bool, _ writable: Bool) -> Void] = [:]
    private var roundEndHooks: [() -> Void] = []
    private var stopHooks: [() -> Void] = []
    private var locals: [AnyHashable: AnyObject] = [:]
    private let handedOver = Mutex<(work: [@Sendable () -> Void], stopping: Bool)>(([], false))
    private let finished = DispatchSemaphore(value: 0)
    /// Milliseconds the loop may sleep at most, asked before every wait (-1: until something is ready).
    package var sleepLimit: () -> Int32 = { -1 }

    /// Linux's `SCHED_BATCH` (3 in `<linux/sched.h>`), which glibc's `<sched.h>` declares only under `_GNU_SOURCE`.
    package static let batchPolicy: Int32 = 3

    /// The loop whose thread is calling, if any.
    package static var current: EventLoop? {
        guard let pointer = pthread_getspecific(currentLoopKey) else { return nil }
        return Unmanaged<EventLoop>.fromOpaque(pointer).takeUnretainedValue()
    }

    /// Creates a loop; ``start(name:)`` gives it its thread.
    /// - Throws: `POSIXError` when epoll or the wake-up eventfd cannot be created.
    package init() throws {
        epoll = epoll_create1(Int32(EPOLL_CLOEXEC))
        guard epoll >= 0 else { throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO) }
        wakeup = eventfd(0, Int32(EFD_CLOEXEC | EFD_NONBLOCK))
        guard wakeup >= 0 else {
            close(epoll)
            throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO)
        }
        var event = epoll_event(events: EPOLLIN.rawValue, data: epoll_data_t(fd: wakeup))
        epoll_ctl(epoll, EPOLL_CTL_ADD, wakeup, &event)
    }

    deinit {
        close(wakeup)
        close(epoll)
    }

    /// Runs the loop on a new thread until ``stop()``; `setUp` runs first on that thread (register descriptors
    /// there), `tearDown` last.
    ///
    /// With `batchScheduling`, the thread runs under Linux's `SCHED_BATCH` policy (a normal share of the CPU, but its
    /// wake-ups do not preempt the task running on the core): woken by a client or by its database connection, the
    /// loop waits for the core's current task to finish its slice instead of taking the core at once, so a round
    /// finds more work waiting and the core switches tasks less often. When the policy cannot be set, the thread
    /// keeps the default one.
    package func start(name: String, batchScheduling: Bool = false, setUp: @escaping @Sendable () -> Void = {},
                       tearDown: @escaping @Sendable () -> Void = {}) {
        let thread = Thread { [self] in
            if batchScheduling {
                var parameter = sched_param(sched_priority: 0)
                _ = sched_setscheduler(0, EventLoop.batchPolicy, &parameter)
            }
            pthread_setspecific(currentLoopKey, Unmanaged.passUnretained(self).toOpaque())
            setUp()
            run()
            stopHooks.forEach { $0() }
            tearDown()
            handlers.removeAll()
            roundEndHooks.removeAll()
            stopHooks.removeAll()
            locals.removeAll()
            pthread_setspecific(currentLoopKey, nil)
            finished.signal()
        }
        thread.name = name
        thread.start()
    }

    /// Ends the loop after its current round and waits until its thread has torn down. Call it from another thread.
    package func stop() {
        handedOver.withLock { $0.stopping = true }
        signalWakeup()
        finished.wait()
    }

    /// Runs `work` on the loop's thread in its next round; callable from any thread.
    package func execute(_ work: @escaping @Sendable () -> Void) {
        handedOver.withLock { $0.work.append(work) }
        signalWakeup()
    }

    /// Watches `descriptor` (on the loop's thread): `handler` is called with what it is ready for.
    package func watch(_ descriptor: Int32, readable: Bool = true, writable: Bool = false,
                       _ handler: @escaping (_ readable: Bool, _ writable: Bool) -> Void) {
        handlers[descriptor] = handler
        var event = epoll_event(events: Self.mask(readable: readable, writable: writable), data: epoll_data_t(fd: descriptor))
        epoll_ctl(epoll, EPOLL_CTL_ADD, descriptor, &event)
    }

    /// Changes what a watched descriptor is waited for.
    package func change(_ descriptor: Int32, readable: Bool, writable: Bool) {
        var event = epoll_event(events: Self.mask(readable: readable, writable: writable), data: epoll_data_t(fd: descriptor))
        epoll_ctl(epoll, EPOLL_CTL_MOD, descriptor, &event)
    }

    /// Stops watching `descriptor` (before it is closed).
    package func unwatch(_ descriptor: Int32) {
        handlers[descriptor] = nil
        epoll_ctl(epoll, EPOLL_CTL_DEL, descriptor, nil)
    }

    /// Adds work run at the end of every round, after the handlers.
    package func atEndOfRound(_ hook: @escaping () -> Void) {
        roundEndHooks.append(hook)
    }

    /// Adds work run once when the loop stops, on its thread after its last round (before `tearDown`): where what is
    /// still in flight is failed, so no callback is left waiting for a round that never comes.
    package func atStop(_ hook: @escaping () -> Void) {
        stopHooks.append(hook)
    }

    /// This loop's object for `key`, made by `make` the first time (nil: none, asked again next time). Lives until
    /// the loop ends: one database connection per loop, say.
    package func local<Key: Hashable, Value: AnyObject>(_ key: Key, make: () -> Value?) -> Value? {
        if let value = locals[AnyHashable(key)] { return value as? Value }
        guard let value = make() else { return nil }
        locals[AnyHashable(key)] = value
        return value
    }

    private static func mask(readable: Bool, writable: Bool) -> UInt32 {
        (readable ? EPOLLIN.rawValue : 0) | (writable ? EPOLLOUT.rawValue : 0)
    }

    private func signalWakeup() {
        var one: UInt64 = 1
        _ = write(wakeup, &one, 8)
    }

    private func run() {
        var events = [epoll_event](repeating: epoll_event(), count: 64)
        while true {
            let ready = events.withUnsafeMutableBufferPointer { epoll_wait(epoll, $0.baseAddress, Int32($0.count), sleepLimit()) }
            var woken = false
            for index in 0..<Int(max(ready, 0)) {
                let event = events[index]
                if event.data.fd == wakeup {
                    woken = true
                    continue
                }
                let flags = event.events
                let failed = flags & (EPOLLERR.rawValue | EPOLLHUP.rawValue) != 0
                handlers[event.data.fd]?(flags & EPOLLIN.rawValue != 0 || failed, flags & EPOLLOUT.rawValue != 0)
            }
            if woken {
                var count: UInt64 = 0
                _ = read(wakeup, &count, 8)
                let (work, stopping) = handedOver.withLock { state in
                    defer { state.work.removeAll() }
                    return (state.work, state.stopping)
                }
                work.forEach { $0() }
                if stopping {
                    roundEndHooks.forEach { $0() }
                    return
                }
            }
            roundEndHooks.forEach { $0() }
        }
    }
}

/// The thread-specific slot holding the running loop of each loop thread.
private let currentLoopKey: pthread_key_t = {
    var key = pthread_key_t()
    pthread_key_create(&key, nil)
    return key
}()
