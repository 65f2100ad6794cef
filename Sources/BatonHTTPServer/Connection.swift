import BatonConcurrency
import Foundation
import BatonLogging
import Synchronization
internal import CBatonMicroHTTPD

/// What the libmicrohttpd callbacks share: the router, the limits, the request counters and the
/// connections still reading a request (for the request-head deadline).
final class ServerCore: Sendable {
    let router: Router
    let configuration: HTTPServerConfiguration
    /// The limits every request's lifecycle is held to, from ``configuration``.
    let limits: RequestLifecycle.Limits
    let logger: Logger
    /// Requests begun and not yet completed (sent or aborted). Atomics, not a lock: every request of every
    /// polling thread counts here twice.
    private let active = Atomic<Int>(0)
    /// Handlers running on Swift tasks, counted until libmicrohttpd has taken their resumed connection back.
    private let running = Atomic<Int>(0)
    private let stopping = Atomic<Bool>(false)
    /// Connections reading a request: socket and when its deadline passes, by connection pointer.
    private let reading = Mutex<[UInt: (socket: Int32, deadline: ContinuousClock.Instant)]>([:])
    /// Connections by client address (``HTTPServerConfiguration/connectionsPerAddress``), across every daemon. Each
    /// step is O(1) and the lock is held for that step alone, never across a system call.
    private let perAddress: Mutex<AddressLimit>

    init(router: Router, configuration: HTTPServerConfiguration, logger: Logger) {
        self.router = router
        self.configuration = configuration
        limits = RequestLifecycle.Limits(configuration)
        self.logger = logger
        perAddress = Mutex(AddressLimit(limit: configuration.connectionsPerAddress, wait: configuration.addressSlotWait))
    }

    func requestBegan() { active.wrappingAdd(1, ordering: .relaxed) }
    func requestEnded() { active.wrappingSubtract(1, ordering: .relaxed) }
    // `running` and `stopping` are sequentially consistent: a handler counts itself, then checks `stopping`; `stop()`
    // sets `stopping`, then reads the count. One of them sees the other, so no handler suspends a connection after
    // `stop()` found none running (libmicrohttpd aborts when stopped with a suspended connection).
    func handlerBegan() { running.wrappingAdd(1, ordering: .sequentiallyConsistent) }
    func handlerEnded() { running.wrappingSubtract(1, ordering: .sequentiallyConsistent) }
    func beginStopping() { stopping.store(true, ordering: .sequentiallyConsistent) }
    var isStopping: Bool { stopping.load(ordering: .sequentiallyConsistent) }
    /// Both counts, each read atomically (``HTTPServer/stop()`` polls them until both reach zero).
    func counts() -> (active: Int, running: Int) { (active.load(ordering: .acquiring), running.load(ordering: .sequentiallyConsistent)) }

    // MARK: Connections per address across daemons

    /// Counts a new connection of `address`, or has it wait for a slot, or drops it (``AddressLimit``).
    func connectionOpened(_ connection: OpaquePointer, from address: ClientAddress) -> AddressLimit.Admission {
        let now = ContinuousClock.now
        return perAddress.withLock { $0.opened(UInt(bitPattern: connection), from: address, at: now) }
    }

    /// Whether `connection`, its request read, is served, refused, or waits on for a slot.
    func requestRead(_ connection: OpaquePointer, from address: ClientAddress) -> AddressLimit.Verdict {
        let now = ContinuousClock.now
        return perAddress.withLock { $0.requestRead(UInt(bitPattern: connection), from: address, at: now) }
    }

    /// Leaves `resume` to whichever comes first, a slot or the end of the wait; false when one came already.
    func park(_ connection: OpaquePointer, from address: ClientAddress, resume: @escaping @Sendable () -> Void) -> Bool {
        perAddress.withLock { $0.park(UInt(bitPattern: connection), from: address, resume: resume) }
    }

    /// Refuses `connection` if it still waits for a slot and its wait has passed, and resumes it.
    func waitEnded(_ connection: UInt, from address: ClientAddress) {
        let now = ContinuousClock.now
        perAddress.withLock { $0.waitEnded(connection, from: address, at: now) }?()
    }

    /// Forgets a closed connection; a slot it held goes to the oldest connection of its address waiting, which is
    /// resumed (outside the lock) when it was suspended for it.
    func connectionClosed(_ connection: OpaquePointer, from address: ClientAddress) {
        perAddress.withLock { $0.closed(UInt(bitPattern: connection), from: address) }?()
    }

    /// Whether connections per address are counted: ``HTTPServerConfiguration/connectionsPerAddress`` is set.
    var countsConnectionsPerAddress: Bool { configuration.connectionsPerAddress > 0 }

    // MARK: Request-head deadline

    /// Starts watching `connection` (opened, or done with its previous request) until its request is read.
    func readingBegan(_ connection: OpaquePointer) {
        guard let limit = configuration.requestHeadTimeout else { return }
        let socket = CMicroHTTPD_connection_fd(connection)
        guard socket >= 0 else { return }
        let deadline = ContinuousClock.now + limit
        reading.withLock { $0[UInt(bitPattern: connection)] = (socket, deadline) }
    }

    /// Stops watching `connection`: its request is read, or it closed. libmicrohttpd reports a close before
    /// it closes the socket, so a socket still listed here is never one reused by another connection.
    func readingEnded(_ connection: OpaquePointer) {
        guard configuration.requestHeadTimeout != nil else { return }
        _ = reading.withLock { $0.removeValue(forKey: UInt(bitPattern: connection)) }
    }

    /// Shuts down the sockets of connections past their deadline: libmicrohttpd then sees the end of the stream
    /// and closes them itself (the socket is never closed here, so it cannot be closed twice).
    func sweep() {
        let now = ContinuousClock.now
        let late = reading.withLock { entries -> Int in
            let expired = entries.filter { $0.value.deadline <= now }
            for (key, entry) in expired {
                shutdown(entry.socket, Int32(SHUT_RDWR))
                entries.removeValue(forKey: key)
            }
            return expired.count
        }
        if late > 0 { logger.info("closed connections too slow to send a request", ["count": String(late)]) }
    }
}

/// What a daemon's libmicrohttpd callbacks are given (its `cls`): the server's core and, for a daemon an event loop
/// polls, that loop, passed from where the daemon is made instead of looked up on the calling thread.
final class DaemonContext: Sendable {
    /// The server's shared state.
    let core: ServerCore
    /// The loop that polls the daemon; nil with libmicrohttpd's own threads.
    let serving: ServingLoop?

    init(core: ServerCore, serving: ServingLoop?) {
        self.core = core
        self.serving = serving
    }
}

/// An event loop with the state of the requests its daemon started (``LoopRequests``), which belongs to the loop
/// (``LoopBound``): the loop can be carried to any thread, the requests are reached only on its thread (checked).
final class ServingLoop: Sendable {
    /// The loop.
    let loop: EventLoop
    private let loopRequests: LoopBound<LoopRequests>

    init(_ loop: EventLoop) {
        self.loop = loop
        loopRequests = LoopBound(LoopRequests(), loop: loop)
    }

    /// The loop's requests; call it on the loop's thread (checked).
    var requests: LoopRequests { loopRequests.value }

    /// Runs `work` on the loop's thread: now when the caller is on it (`onLoopThread`, which the caller knows), else in
    /// the loop's next round.
    func run(_ work: @escaping @Sendable () -> Void, onLoopThread: Bool) {
        if onLoopThread { work() } else { loop.execute(work) }
    }
}

/// One request on the thread that polls its connection: its ``RequestLifecycle`` and what performing its actions
/// needs. libmicrohttpd's `con_cls` slot holds it from the first callback until the completion callback releases it.
/// Not `Sendable`: another thread reaches it only through a ``LoopBound`` (on an event loop, checked), or not at all
/// (with libmicrohttpd's own threads, an answer from another thread crosses over in a ``CrossThreadAnswer``).
final class RequestContext {
    let connection: OpaquePointer
    var lifecycle: RequestLifecycle
    /// On an event loop: the task running the handler's async work, which its deadline cancels.
    var handlerTask: Task<Void, Never>?
    /// With libmicrohttpd's own threads: where the handler's answer, or its deadline's, waits for the connection's
    /// resumption.
    var crossing: CrossThreadAnswer?

    init(_ connection: OpaquePointer, limits: RequestLifecycle.Limits) {
        self.connection = connection
        lifecycle = RequestLifecycle(limits: limits)
    }
}

/// A handler's answer crossing over to one of libmicrohttpd's own threads, which no other thread can hand work to:
/// the task that computed it (or the task keeping its deadline) leaves it here and resumes the connection; the access
/// handler, called again on the connection's thread, carries it into the request's lifecycle
/// (``RequestLifecycle/called(answer:)``). The one lock of such a request, because two tasks race to answer and only
/// the first may resume the connection; it holds both tasks, so the first cancels the other.
final class CrossThreadAnswer: Sendable {
    private struct State {
        var answered = false
        var answer: HTTPResponse?
        var handler: Task<Void, Never>?
        var deadline: Task<Void, Never>?
    }

    private let state = Mutex(State())

    /// Keeps the handler's task and its deadline's, so the one that loses is cancelled; cancels both when an answer
    /// came first.
    func watch(handler: Task<Void, Never>?, deadline: Task<Void, Never>?) {
        let answered = state.withLock { state in
            if !state.answered { (state.handler, state.deadline) = (handler, deadline) }
            return state.answered
        }
        if answered {
            handler?.cancel()
            deadline?.cancel()
        }
    }

    /// Leaves `response` unless an answer came first; true for the first caller only, which resumes the connection.
    /// The other task is cancelled: the deadline's when the handler answers, the handler's when its deadline does.
    func answer(_ response: HTTPResponse, byDeadline: Bool) -> Bool {
        let (first, other) = state.withLock { state -> (Bool, Task<Void, Never>?) in
            guard !state.answered else { return (false, nil) }
            state.answered = true
            state.answer = response
            defer { (state.handler, state.deadline) = (nil, nil) }
            return (true, byDeadline ? state.handler : state.deadline)
        }
        other?.cancel()
        return first
    }

    /// The answer left, once.
    func take() -> HTTPResponse? { state.withLock { $0.answer.take() } }
}

/// A connection pointer carried to another thread, which only passes it to `MHD_resume_connection` (documented
/// thread-safe) once, while the connection is suspended.
private struct SuspendedConnection: @unchecked Sendable {
    let pointer: OpaquePointer
}

/// Owns a libmicrohttpd response; `deinit` releases our reference (the library keeps its own while sending).
private final class MHDResponse {
    let pointer: OpaquePointer

    init?(_ response: HTTPResponse, closeConnection: Bool) {
        let created: OpaquePointer? = response.body.withUnsafeBytes { bytes in
            MHD_create_response_from_buffer(bytes.count, UnsafeMutableRawPointer(mutating: bytes.baseAddress), .RESPMEM_MUST_COPY)
        }
        guard let created else { return nil }
        pointer = created
        for field in response.headers {
            // A header with CR/LF or an empty name is refused by the library: it is simply not sent.
            _ = MHD_add_response_header(created, field.name, field.value)
        }
        if closeConnection { _ = MHD_add_response_header(created, "Connection", "close") }
    }

    deinit { MHD_destroy_response(pointer) }
}

/// libmicrohttpd's access handler: turns each call into an event of the request's ``RequestLifecycle`` (the head,
/// a chunk of the body, the request read or the connection taken back) and performs what it returns.
func batonAccessHandler(
    _ cls: UnsafeMutableRawPointer?,
    _ connection: OpaquePointer?,
    _ url: UnsafePointer<CChar>?,
    _ method: UnsafePointer<CChar>?,
    _ version: UnsafePointer<CChar>?,
    _ uploadData: UnsafePointer<CChar>?,
    _ uploadDataSize: UnsafeMutablePointer<Int>?,
    _ contextSlot: UnsafeMutablePointer<UnsafeMutableRawPointer?>?
) -> MHD_Result {
    guard let cls, let connection, let url, let method, let uploadDataSize, let contextSlot else { return CMicroHTTPD_no() }
    let daemon = Unmanaged<DaemonContext>.fromOpaque(cls).takeUnretainedValue()
    let core = daemon.core

    guard let slot = contextSlot.pointee else {
        // First call: the head is parsed.
        let context = RequestContext(connection, limits: core.limits)
        contextSlot.pointee = Unmanaged.passRetained(context).toOpaque()
        core.requestBegan()
        let announced = MHD_lookup_connection_value(connection, .HEADER_KIND, "Content-Length").flatMap { UInt64(String(cString: $0)) }
        let action = context.lifecycle.headReceived(headSize: CMicroHTTPD_request_head_size(connection), announcedBodySize: announced)
        // Answered with its head: the request-head deadline no longer applies.
        if case .queue = action { core.readingEnded(connection) }
        return perform(action, context, daemon, url: url, method: method)
    }
    let context = Unmanaged<RequestContext>.fromOpaque(slot).takeUnretainedValue()

    if uploadDataSize.pointee > 0 {
        if let uploadData { context.lifecycle.bodyReceived(UnsafeRawBufferPointer(start: uploadData, count: uploadDataSize.pointee)) }
        uploadDataSize.pointee = 0
        return CMicroHTTPD_yes()
    }
    let (tookBack, action) = context.lifecycle.called(answer: context.crossing?.take())
    // A handler, or a wait for a slot, counts as running until libmicrohttpd has taken the resumed connection back:
    // stopping the daemon while a resumed connection is still on its suspended list aborts the process.
    if tookBack { core.handlerEnded() }
    return perform(action, context, daemon, url: url, method: method)
}

/// Performs `action` for `context`'s request in the access handler, and the actions the events it leads to return,
/// until one leaves the connection to libmicrohttpd; returns what the access handler answers.
private func perform(_ action: RequestLifecycle.Action, _ context: RequestContext, _ daemon: DaemonContext,
                     url: UnsafePointer<CChar>, method: UnsafePointer<CChar>) -> MHD_Result {
    let core = daemon.core, connection = context.connection
    var action = action
    // What the router handed on, started once the connection is suspended; the address waiting for a slot.
    var routed: (request: HTTPRequest, answer: NowOrLater<HTTPResponse>)?
    var waiting: ClientAddress?
    while true {
        switch action {
        case .proceed:
            return CMicroHTTPD_yes()
        case .queue(let response, let closing):
            return queue(response, on: connection, core: core, closing: closing)
        case .admit:
            core.readingEnded(connection)
            let counted = CountedConnection.of(connection).flatMap { $0.arrivedOverLimit ? $0.address : nil }
            waiting = counted
            action = context.lifecycle.admitted(counted.map { admission(connection, of: $0, core) } ?? .serve)
        case .route(let body):
            let request = HTTPRequest(
                method: String(cString: method),
                path: String(cString: url),
                query: queryParameters(connection),
                headers: requestHeaders(connection),
                body: body,
                remoteAddress: CMicroHTTPD_client_address(connection).flatMap(numericHost)
            )
            // Answered on this thread when the route can (no hop at all); otherwise the connection waits for the answer.
            let answer = core.router.respondWithoutWaiting(to: request, context: HTTPRequestContext(loop: daemon.serving?.loop), logger: core.logger)
            if case .now(let response) = answer {
                action = context.lifecycle.answeredAtOnce(response)
            } else {
                routed = (request, answer)
                action = context.lifecycle.handlerStarted()
            }
        case .suspendForHandler:
            guard suspend(connection, core) else {
                action = context.lifecycle.suspensionRefused()
                continue
            }
            if let routed { startHandler(routed.answer, for: routed.request, context, daemon) }
            return CMicroHTTPD_yes()
        case .suspendForSlot(let until):
            guard suspend(connection, core) else {
                action = context.lifecycle.suspensionRefused()
                continue
            }
            if let waiting { waitForSlot(connection, of: waiting, until: until, daemon) }
            return CMicroHTTPD_yes()
        }
    }
}

/// Queues `response`; with `closing` (or while the server stops) it says `Connection: close` and libmicrohttpd
/// closes the connection once it is sent.
private func queue(_ response: HTTPResponse, on connection: OpaquePointer, core: ServerCore, closing: Bool) -> MHD_Result {
    guard let mhd = MHDResponse(response, closeConnection: closing || core.isStopping) else { return CMicroHTTPD_no() }
    return MHD_queue_response(connection, UInt32(clamping: response.status), mhd.pointer)
}

/// The address limit's verdict on the request of `connection`, which arrived over `address`'s limit; a refusal is
/// logged.
private func admission(_ connection: OpaquePointer, of address: ClientAddress, _ core: ServerCore) -> AddressLimit.Verdict {
    let verdict = core.requestRead(connection, from: address)
    if verdict == .refuse {
        // Answered once the request is read (so the close does not reset it), then closed: one answer per refusal.
        core.logger.info("connection over the per-address limit", ["address": clientHost(connection), "answer": "503 too_many_connections"])
    }
    return verdict
}

/// Counts a handler (or a wait for a slot) as running and suspends `connection` for it; false, uncounted and not
/// suspended, when the server is stopping: it is too late to wait for an answer (``HTTPServer/stop()`` may already
/// have found no handler running).
private func suspend(_ connection: OpaquePointer, _ core: ServerCore) -> Bool {
    core.handlerBegan()
    guard !core.isStopping else {
        core.handlerEnded()
        return false
    }
    MHD_suspend_connection(connection)
    return true
}

/// Starts the work the router handed on, its connection suspended, and its deadline. On an event loop both reach
/// the request's lifecycle on the loop's thread (``RequestLifecycle/handlerAnswered(_:)``,
/// ``RequestLifecycle/deadlinePassed()``), the deadline kept by the loop's rounds; with libmicrohttpd's own threads,
/// which nothing can run on, the first of them crosses over (``CrossThreadAnswer``) and resumes the connection.
private func startHandler(_ answer: NowOrLater<HTTPResponse>, for request: HTTPRequest, _ context: RequestContext, _ daemon: DaemonContext) {
    let core = daemon.core
    let timeout = core.configuration.handlerTimeout
    let method = request.method, path = request.path
    let logTimeout: @Sendable () -> Void = { core.logger.warning("request timed out", ["method": method, "path": path]) }
    let deliver: @Sendable (HTTPResponse, _ onLoopThread: Bool) -> Void
    var deadline: Task<Void, Never>?
    let crossing: CrossThreadAnswer?
    if let serving = daemon.serving {
        let bound = LoopBound(context, loop: serving.loop)
        deliver = { response, onLoopThread in
            serving.run({
                let context = bound.value
                resume(context.lifecycle.handlerAnswered(response), context, on: serving, logTimeout)
            }, onLoopThread: onLoopThread)
        }
        if let timeout {
            serving.requests.add(ContinuousClock.now + timeout, context) {
                resume(context.lifecycle.deadlinePassed(), context, on: serving, logTimeout)
            }
        }
        crossing = nil
    } else {
        let answers = CrossThreadAnswer(), suspended = SuspendedConnection(pointer: context.connection)
        deliver = { response, _ in
            if answers.answer(response, byDeadline: false) { MHD_resume_connection(suspended.pointer) }
        }
        deadline = timeout.map { timeout in
            Task {
                try? await Task.sleep(for: timeout)
                guard !Task.isCancelled, answers.answer(HTTPError.timeout(after: timeout).response, byDeadline: true) else { return }
                logTimeout()
                MHD_resume_connection(suspended.pointer)
            }
        }
        context.crossing = answers
        crossing = answers
    }
    var handler: Task<Void, Never>?
    switch answer {
    case .now(let response): deliver(response, true)
    case .later(let work): handler = Task { deliver(await settled(work), false) }
    case .soon(let start): start { settle($0, deliver) }
    }
    if let crossing { crossing.watch(handler: handler, deadline: deadline) } else { context.handlerTask = handler }
}

/// Performs what an answer or a deadline reaching the loop came to: the suspended connection resumed (the loop runs
/// libmicrohttpd again this round), after a timeout is logged and the handler's task cancelled.
private func resume(_ resumption: RequestLifecycle.Resumption, _ context: RequestContext, on serving: ServingLoop,
                    _ logTimeout: () -> Void) {
    switch resumption {
    case .none: return
    case .resume: break
    case .timeOut:
        logTimeout()
        context.handlerTask?.cancel()
    }
    context.handlerTask = nil
    MHD_resume_connection(context.connection)
    serving.requests.resumed = true
}

/// Resumes a connection suspended for a slot. An event loop's daemon is resumed on the loop's thread (at once when
/// the caller is on it, `onLoopThread`), which then runs libmicrohttpd in the same round (the daemon's own wake-up
/// does not reach the loop's epoll when it comes from another thread); libmicrohttpd's own threads are woken by the
/// library.
private func resume(_ connection: SuspendedConnection, on serving: ServingLoop?, onLoopThread: Bool) {
    guard let serving else { return MHD_resume_connection(connection.pointer) }
    serving.run({
        MHD_resume_connection(connection.pointer)
        serving.requests.resumed = true
    }, onLoopThread: onLoopThread)
}

/// Leaves a connection suspended over its address's limit, its request read, until one of its address's connections
/// closes and hands it a slot (it is then served) or its wait ends at `until` (it is then refused): ``AddressLimit``.
/// It counts as a running handler meanwhile, so ``HTTPServer/stop()`` waits for it.
private func waitForSlot(_ connection: OpaquePointer, of address: ClientAddress, until: ContinuousClock.Instant, _ daemon: DaemonContext) {
    let core = daemon.core
    // Only a suspended connection may be resumed, so it is handed to other threads only now; a slot freed since its
    // verdict leaves it to be resumed here. A slot is freed by a connection closing on any daemon's thread, or by a
    // task: resumed in the loop's next round.
    let suspended = SuspendedConnection(pointer: connection), serving = daemon.serving
    guard core.park(connection, from: address, resume: { resume(suspended, on: serving, onLoopThread: false) }) else {
        return resume(suspended, on: serving, onLoopThread: true)
    }
    let id = UInt(bitPattern: connection)
    Task {
        try? await Task.sleep(until: until, clock: .continuous)
        core.waitEnded(id, from: address)
    }
}

/// What async work comes to: its response (the router's work maps every error to a response already), else 500.
private func settled(_ work: @Sendable () async throws -> HTTPResponse) async -> HTTPResponse {
    (try? await work()) ?? HTTPError.internalError.response
}

/// Answers through `deliver` with what a step on the event loop came to (delivered on the loop's thread): a response,
/// async work, or another step.
private func settle(_ outcome: Result<NowOrLater<HTTPResponse>, any Error>, _ deliver: @escaping @Sendable (HTTPResponse, _ onLoopThread: Bool) -> Void) {
    switch outcome {
    case .success(.now(let response)): deliver(response, true)
    case .success(.later(let work)): Task { deliver(await settled(work), false) }
    case .success(.soon(let next)): next { settle($0, deliver) }
    case .failure: deliver(HTTPError.internalError.response, true)
    }
}

/// What an event loop's daemon must do for the requests its handlers started: run libmicrohttpd again when one was
/// resumed since it last ran, and tell those past their deadline. The deadlines are kept oldest first (they share
/// one timeout, so that is also the order they pass in). It belongs to the loop (``ServingLoop/requests``).
final class LoopRequests {
    /// A connection was resumed since libmicrohttpd last ran: it must run again this round to send the answer.
    var resumed = false
    private var entries: [(deadline: ContinuousClock.Instant, context: RequestContext, passed: () -> Void)] = []
    private var head = 0

    /// Calls `passed` once `deadline` has passed, unless `context`'s request no longer waits for its answer by then.
    func add(_ deadline: ContinuousClock.Instant, _ context: RequestContext, passed: @escaping () -> Void) {
        entries.append((deadline, context, passed))
    }

    /// Drops the requests at the front no longer waiting for their answer and tells those past their deadline (their
    /// lifecycle decides whether that still answers them).
    func answerOverdue() {
        guard head < entries.count else { return }
        let now = ContinuousClock.now
        while head < entries.count {
            if entries[head].deadline <= now {
                entries[head].passed()
            } else if entries[head].context.lifecycle.awaitsAnswer {
                break
            }
            head += 1
        }
        if head == entries.count || head >= 64 {
            entries.removeFirst(head)
            head = 0
        }
    }

    /// Milliseconds until the oldest unanswered deadline, at most `cap`.
    func sleepLimit(cap: Int32) -> Int32 {
        guard head < entries.count else { return cap }
        let left = entries[head].deadline - ContinuousClock.now
        let milliseconds = left.components.seconds * 1000 + left.components.attoseconds / 1_000_000_000_000_000 + 1
        return Int32(clamping: max(0, min(Int64(cap), milliseconds)))
    }
}

/// libmicrohttpd's completion callback: the request's lifecycle ends and its context is released.
func batonRequestCompleted(
    _ cls: UnsafeMutableRawPointer?,
    _ connection: OpaquePointer?,
    _ contextSlot: UnsafeMutablePointer<UnsafeMutableRawPointer?>?,
    _ termination: MHD_RequestTerminationCode
) {
    guard let cls, let contextSlot, let slot = contextSlot.pointee else { return }
    let core = Unmanaged<DaemonContext>.fromOpaque(cls).takeUnretainedValue().core
    let context = Unmanaged<RequestContext>.fromOpaque(slot).takeRetainedValue()
    contextSlot.pointee = nil
    // A resumed connection that ended before its response was queued (the client went away) is taken back here.
    if context.lifecycle.completed() { core.handlerEnded() }
    core.requestEnded()
    // A kept-alive connection now waits for its next request: the deadline applies again.
    if let connection, termination == .REQUEST_TERMINATED_COMPLETED_OK { core.readingBegan(connection) }
}

/// libmicrohttpd's connection callback: a new connection is counted against its address's limit and starts its
/// request-head deadline; a closed one is forgotten.
func batonConnectionNotified(
    _ cls: UnsafeMutableRawPointer?,
    _ connection: OpaquePointer?,
    _ socketContext: UnsafeMutablePointer<UnsafeMutableRawPointer?>?,
    _ code: MHD_ConnectionNotificationCode
) {
    guard let cls, let connection else { return }
    let core = Unmanaged<DaemonContext>.fromOpaque(cls).takeUnretainedValue().core
    switch code {
    case .CONNECTION_NOTIFY_STARTED:
        if core.countsConnectionsPerAddress, let socketContext, let address = CMicroHTTPD_client_address(connection).flatMap(ClientAddress.init) {
            let admission = core.connectionOpened(connection, from: address)
            guard admission != .dropped else {
                core.logger.info("connection over the per-address limit", ["address": clientHost(connection), "answer": "none, closed"])
                // libmicrohttpd sees the end of the stream and closes it.
                shutdown(CMicroHTTPD_connection_fd(connection), Int32(SHUT_RDWR))
                return
            }
            // Remembered in the socket's slot, so the close forgets exactly what was counted.
            socketContext.pointee = Unmanaged.passRetained(CountedConnection(address: address, arrivedOverLimit: admission == .waiting)).toOpaque()
        }
        core.readingBegan(connection)
    default:
        if let socketContext, let slot = socketContext.pointee {
            let counted = Unmanaged<CountedConnection>.fromOpaque(slot).takeRetainedValue()
            core.connectionClosed(connection, from: counted.address)
            socketContext.pointee = nil
        }
        core.readingEnded(connection)
    }
}

/// A connection counted against its client address's limit, or waiting for a slot under it.
final class CountedConnection: Sendable {
    let address: ClientAddress
    /// Whether it had to wait for a slot: only then are its requests checked (``ServerCore/requestRead(_:from:)``);
    /// a connection counted when it opened holds its slot until it closes.
    let arrivedOverLimit: Bool

    init(address: ClientAddress, arrivedOverLimit: Bool) {
        self.address = address
        self.arrivedOverLimit = arrivedOverLimit
    }

    /// The one in `connection`'s socket slot, if any.
    static func of(_ connection: OpaquePointer) -> CountedConnection? {
        guard let slot = CMicroHTTPD_socket_context(connection) else { return nil }
        return Unmanaged<CountedConnection>.fromOpaque(slot).takeUnretainedValue()
    }
}

/// The client's numeric address for the log, `?` when unknown.
private func clientHost(_ connection: OpaquePointer) -> String {
    CMicroHTTPD_client_address(connection).flatMap(numericHost) ?? "?"
}

private typealias Fields = [(String, String)]

/// Appends one key/value pair to the `Fields` array `cls` points to.
private func batonCollectValue(
    _ cls: UnsafeMutableRawPointer?,
    _ kind: MHD_ValueKind,
    _ key: UnsafePointer<CChar>?,
    _ value: UnsafePointer<CChar>?
) -> MHD_Result {
    guard let cls, let key else { return CMicroHTTPD_yes() }
    let fields = cls.assumingMemoryBound(to: Fields.self)
    fields.pointee.append((String(cString: key), value.map { String(cString: $0) } ?? ""))
    return CMicroHTTPD_yes()
}

private func requestHeaders(_ connection: OpaquePointer) -> HTTPHeaders {
    var fields: Fields = []
    fields.reserveCapacity(8)
    _ = withUnsafeMutablePointer(to: &fields) { MHD_get_connection_values(connection, .HEADER_KIND, batonCollectValue, $0) }
    return HTTPHeaders(fields)
}

/// Appends one key/value pair with their lengths, so a decoded `%00` stays in the value (and is refused
/// downstream) instead of silently cutting it short.
private func batonCollectSizedValue(
    _ cls: UnsafeMutableRawPointer?,
    _ kind: MHD_ValueKind,
    _ key: UnsafePointer<CChar>?,
    _ keySize: Int,
    _ value: UnsafePointer<CChar>?,
    _ valueSize: Int
) -> MHD_Result {
    guard let cls, let key else { return CMicroHTTPD_yes() }
    func text(_ pointer: UnsafePointer<CChar>, _ count: Int) -> String {
        pointer.withMemoryRebound(to: UInt8.self, capacity: count) { String(decoding: UnsafeBufferPointer(start: $0, count: count), as: UTF8.self) }
    }
    let fields = cls.assumingMemoryBound(to: Fields.self)
    fields.pointee.append((text(key, keySize), value.map { text($0, valueSize) } ?? ""))
    return CMicroHTTPD_yes()
}

private func queryParameters(_ connection: OpaquePointer) -> [String: String] {
    var fields: Fields = []
    _ = withUnsafeMutablePointer(to: &fields) { MHD_get_connection_values_n(connection, .GET_ARGUMENT_KIND, batonCollectSizedValue, $0) }
    var query: [String: String] = [:]
    for (name, value) in fields where query[name] == nil { query[name] = value }
    return query
}

private func numericHost(_ address: UnsafePointer<sockaddr>) -> String? {
    let length = socklen_t(address.pointee.sa_family == sa_family_t(AF_INET6) ? MemoryLayout<sockaddr_in6>.size : MemoryLayout<sockaddr_in>.size)
    var buffer = [CChar](repeating: 0, count: Int(NI_MAXHOST))
    guard getnameinfo(address, length, &buffer, socklen_t(buffer.count), nil, 0, NI_NUMERICHOST) == 0 else { return nil }
    return String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
}
