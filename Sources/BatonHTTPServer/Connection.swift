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

/// An event loop with the state of the requests its daemon started (``LoopRequests``), which belongs to the loop:
/// the loop can be carried to any thread, the requests are reached only on its thread (checked).
final class ServingLoop: @unchecked Sendable {
    // `@unchecked Sendable`: `loopRequests` is touched only on `loop`'s thread, which `requests` asserts.
    /// The loop.
    let loop: EventLoop
    private let loopRequests = LoopRequests()

    init(_ loop: EventLoop) {
        self.loop = loop
    }

    /// The loop's requests; call it on the loop's thread.
    var requests: LoopRequests {
        precondition(EventLoop.current === loop, "a loop's requests are used on its own thread")
        return loopRequests
    }

    /// Runs `work` on the loop's thread: now when the caller is on it (`onLoopThread`, which the caller knows), else in
    /// the loop's next round.
    func run(_ work: @escaping @Sendable () -> Void, onLoopThread: Bool) {
        if onLoopThread { work() } else { loop.execute(work) }
    }
}

/// Per-request state, owned by libmicrohttpd's `con_cls` slot from the first callback until
/// the completion callback releases it.
final class RequestContext: Sendable {
    /// The body received so far and whether it overflowed; only touched on the polling thread
    /// that owns the connection, but kept in a mutex so the type is plainly `Sendable`.
    private let upload = Mutex<(body: [UInt8], tooLarge: Bool)>(([], false))
    /// Set by the handler's task (or its deadline) just before it resumes the connection.
    private let answer = Mutex<HTTPResponse?>(nil)
    /// Whether the handler or its deadline has answered: the first one resumes the connection, once.
    private let answered = Atomic<Bool>(false)
    /// The handler's task, which its deadline cancels.
    let handlerTask = Mutex<Task<Void, Never>?>(nil)
    /// Whether a response has been queued before the body was read (a 413 or a 431).
    let queuedEarly = Atomic<Bool>(false)
    /// Whether the connection was suspended for a handler and libmicrohttpd has not yet taken it back (called the
    /// access handler again after `MHD_resume_connection`, or ended the request).
    private let suspended = Atomic<Bool>(false)

    func markSuspended() { suspended.store(true, ordering: .releasing) }

    /// True once, for the first caller after ``markSuspended()``: the connection is libmicrohttpd's again.
    func endSuspension() -> Bool {
        suspended.compareExchange(expected: true, desired: false, ordering: .acquiringAndReleasing).exchanged
    }

    /// Appends a chunk unless that would pass `limit`, in which case the body is dropped.
    func append(_ chunk: UnsafeRawBufferPointer, limit: Int) {
        upload.withLock { upload in
            guard !upload.tooLarge else { return }
            if upload.body.count + chunk.count > limit {
                upload.tooLarge = true
                upload.body = []
            } else {
                upload.body.append(contentsOf: chunk)
            }
        }
    }

    /// The complete body, or nil when it exceeded the limit; leaves the buffer empty.
    func takeBody() -> [UInt8]? {
        upload.withLock { upload in
            if upload.tooLarge { return nil }
            let body = upload.body
            upload.body = []
            return body
        }
    }

    func setResponse(_ response: HTTPResponse) { answer.withLock { $0 = response } }

    /// Whether the handler or its deadline has answered.
    var isAnswered: Bool { answered.load(ordering: .acquiring) }

    /// Stores `response` unless an answer was already given; true for the first caller only.
    func answerOnce(_ response: HTTPResponse) -> Bool {
        guard answered.compareExchange(expected: false, desired: true, ordering: .acquiringAndReleasing).exchanged else { return false }
        setResponse(response)
        return true
    }
    func takeResponse() -> HTTPResponse? { answer.withLock { $0.take() } }
}

/// A connection pointer carried to the handler's task, which only passes it to
/// `MHD_resume_connection` (documented thread-safe) once, while the connection is suspended.
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

/// Queues `response`; with `closing` (or while the server stops) it says `Connection: close` and libmicrohttpd
/// closes the connection once it is sent.
private func queue(_ response: HTTPResponse, on connection: OpaquePointer, core: ServerCore, closing: Bool = false) -> MHD_Result {
    guard let mhd = MHDResponse(response, closeConnection: closing || core.isStopping) else { return CMicroHTTPD_no() }
    return MHD_queue_response(connection, UInt32(clamping: response.status), mhd.pointer)
}

/// libmicrohttpd's access handler: collects the body, then answers through the router on this thread when the
/// route has a blocking handler that can answer at once; otherwise suspends the connection and runs the
/// router's work on a task, and, called again after resumption, queues the stored response.
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
    let limit = core.configuration.maxBodySize

    guard let slot = contextSlot.pointee else {
        // First call: the head is parsed. Refuse an oversized head, or an announced oversized body before reading it.
        let context = RequestContext()
        contextSlot.pointee = Unmanaged.passRetained(context).toOpaque()
        core.requestBegan()
        let headLimit = core.configuration.maxHeaderSize
        let early: HTTPError? = if CMicroHTTPD_request_head_size(connection) > headLimit {
            HTTPError.requestHeadTooLarge(limit: headLimit)
        } else if let length = MHD_lookup_connection_value(connection, .HEADER_KIND, "Content-Length"),
                  let announced = UInt64(String(cString: length)), announced > UInt64(limit) {
            HTTPError.payloadTooLarge(limit: limit)
        } else {
            nil
        }
        guard let early else { return CMicroHTTPD_yes() }
        core.readingEnded(connection)
        context.queuedEarly.store(true, ordering: .relaxed)
        return queue(early.response, on: connection, core: core, closing: true)
    }
    let context = Unmanaged<RequestContext>.fromOpaque(slot).takeUnretainedValue()

    if uploadDataSize.pointee > 0 {
        if let uploadData, !context.queuedEarly.load(ordering: .relaxed) {
            context.append(UnsafeRawBufferPointer(start: uploadData, count: uploadDataSize.pointee), limit: limit)
        }
        uploadDataSize.pointee = 0
        return CMicroHTTPD_yes()
    }
    if context.queuedEarly.load(ordering: .relaxed) { return CMicroHTTPD_yes() }
    // A handler, or a wait for a slot, counts as running until libmicrohttpd has taken the resumed connection back:
    // stopping the daemon while a resumed connection is still on its suspended list aborts the process.
    if context.endSuspension() { core.handlerEnded() }
    if let response = context.takeResponse() { return queue(response, on: connection, core: core) }
    if let counted = CountedConnection.of(connection), counted.arrivedOverLimit {
        switch core.requestRead(connection, from: counted.address) {
        case .serve: break
        case .refuse:
            // Answered once the request is read (so the close does not reset it), then closed: one answer per refusal.
            core.readingEnded(connection)
            core.logger.info("connection over the per-address limit", ["address": clientHost(connection), "answer": "503 too_many_connections"])
            return queue(HTTPError.tooManyConnections(limit: core.configuration.connectionsPerAddress).response, on: connection, core: core, closing: true)
        case .wait(let until):
            core.readingEnded(connection)
            return waitForSlot(connection, of: counted.address, until: until, context, daemon)
        }
    }
    guard let body = context.takeBody() else {
        return queue(HTTPError.payloadTooLarge(limit: limit).response, on: connection, core: core)
    }

    let request = HTTPRequest(
        method: String(cString: method),
        path: String(cString: url),
        query: queryParameters(connection),
        headers: requestHeaders(connection),
        body: body,
        remoteAddress: CMicroHTTPD_client_address(connection).flatMap(numericHost)
    )
    core.readingEnded(connection)
    // Answered on this thread when the route can (no hop at all); otherwise the connection waits for the answer.
    let serving = daemon.serving
    let answer = core.router.respondWithoutWaiting(to: request, context: HTTPRequestContext(loop: serving?.loop), logger: core.logger)
    if case .now(let response) = answer { return queue(response, on: connection, core: core) }
    if let refused = suspendAsHandler(connection, context, core) { return refused }
    let suspended = SuspendedConnection(pointer: connection)
    // The handler and its deadline race; whichever answers first resumes the connection, exactly once. Each caller
    // says whether it runs on the loop's thread.
    let deliver: @Sendable (HTTPResponse, _ onLoopThread: Bool) -> Void = { response, onLoopThread in
        guard context.answerOnce(response) else { return }
        resume(suspended, on: serving, onLoopThread: onLoopThread)
    }
    switch answer {
    case .now: break
    case .later(let work): runOnTask(work, request, context, core) { deliver($0, false) }
    case .soon(let start):
        // Work on this thread's event loop: the loop's round answers it past its deadline.
        if let timeout = core.configuration.handlerTimeout {
            serving?.requests.add(ContinuousClock.now + timeout, context) {
                core.logger.warning("request timed out", ["method": request.method, "path": request.path])
                deliver(HTTPError.timeout(after: timeout).response, true)
            }
        }
        start { settle($0, deliver) }
    }
    return CMicroHTTPD_yes()
}

/// Counts a running handler and suspends `connection` for it; when the server is stopping, it is too late to wait
/// for an answer (``HTTPServer/stop()`` may already have found no handler running): answers 503 at once instead, and
/// returns that result.
private func suspendAsHandler(_ connection: OpaquePointer, _ context: RequestContext, _ core: ServerCore) -> MHD_Result? {
    core.handlerBegan()
    if core.isStopping {
        core.handlerEnded()
        return queue(HTTPError.shuttingDown.response, on: connection, core: core)
    }
    context.markSuspended()
    MHD_suspend_connection(connection)
    return nil
}

/// Resumes a suspended connection. An event loop's daemon is resumed on the loop's thread (at once when the caller is
/// on it, `onLoopThread`), which then runs libmicrohttpd in the same round (the daemon's own wake-up does not reach
/// the loop's epoll when it comes from another thread); libmicrohttpd's own threads are woken by the library.
private func resume(_ connection: SuspendedConnection, on serving: ServingLoop?, onLoopThread: Bool) {
    guard let serving else { return MHD_resume_connection(connection.pointer) }
    serving.run({
        MHD_resume_connection(connection.pointer)
        serving.requests.resumed = true
    }, onLoopThread: onLoopThread)
}

/// Suspends a connection over its address's limit, its request read, until one of its address's connections closes
/// and hands it a slot (it is then served) or its wait ends at `until` (it is then refused): ``AddressLimit``. It
/// counts as a running handler meanwhile, so ``HTTPServer/stop()`` waits for it.
private func waitForSlot(_ connection: OpaquePointer, of address: ClientAddress, until: ContinuousClock.Instant,
                         _ context: RequestContext, _ daemon: DaemonContext) -> MHD_Result {
    let core = daemon.core
    if let refused = suspendAsHandler(connection, context, core) { return refused }
    // Only a suspended connection may be resumed, so it is handed to other threads only now; a slot freed since its
    // verdict leaves it to be resumed here. A slot is freed by a connection closing on any daemon's thread, or by a
    // task: resumed in the loop's next round.
    let suspended = SuspendedConnection(pointer: connection), serving = daemon.serving
    guard core.park(connection, from: address, resume: { resume(suspended, on: serving, onLoopThread: false) }) else {
        resume(suspended, on: serving, onLoopThread: true)
        return CMicroHTTPD_yes()
    }
    let id = UInt(bitPattern: connection)
    Task {
        try? await Task.sleep(until: until, clock: .continuous)
        core.waitEnded(id, from: address)
    }
    return CMicroHTTPD_yes()
}

/// Runs a handler's async work on a task, racing its deadline.
private func runOnTask(_ work: @escaping @Sendable () async throws -> HTTPResponse, _ request: HTTPRequest, _ context: RequestContext,
                       _ core: ServerCore, _ deliver: @escaping @Sendable (HTTPResponse) -> Void) {
    // The deadline's task is cancelled as soon as the handler answers, so no sleeper outlives its request.
    let deadline = core.configuration.handlerTimeout.map { timeout in
        Task {
            try? await Task.sleep(for: timeout)
            guard !Task.isCancelled else { return }
            context.handlerTask.withLock { $0?.cancel() }
            core.logger.warning("request timed out", ["method": request.method, "path": request.path])
            deliver(HTTPError.timeout(after: timeout).response)
        }
    }
    let handler = Task {
        // The router's work maps every error to a response already.
        deliver((try? await work()) ?? HTTPError.internalError.response)
        deadline?.cancel()
    }
    context.handlerTask.withLock { $0 = handler }
}

/// Answers through `deliver` with what a step on the event loop came to (delivered on the loop's thread): a response,
/// async work, or another step.
private func settle(_ outcome: Result<NowOrLater<HTTPResponse>, any Error>, _ deliver: @escaping @Sendable (HTTPResponse, _ onLoopThread: Bool) -> Void) {
    switch outcome {
    case .success(.now(let response)): deliver(response, true)
    case .success(.later(let work)): Task { deliver((try? await work()) ?? HTTPError.internalError.response, false) }
    case .success(.soon(let next)): next { settle($0, deliver) }
    case .failure: deliver(HTTPError.internalError.response, true)
    }
}

/// What an event loop's daemon must do for the requests its handlers started: run libmicrohttpd again when one was
/// resumed since it last ran, and answer those past their deadline. The deadlines are kept oldest first (they share
/// one timeout, so that is also the order they pass in).
final class LoopRequests {
    /// A connection was resumed since libmicrohttpd last ran: it must run again this round to send the answer.
    var resumed = false
    private var entries: [(deadline: ContinuousClock.Instant, context: RequestContext, answer: () -> Void)] = []
    private var head = 0

    func add(_ deadline: ContinuousClock.Instant, _ context: RequestContext, answer: @escaping () -> Void) {
        entries.append((deadline, context, answer))
    }

    /// Drops the answered requests at the front and answers the overdue ones.
    func answerOverdue() {
        guard head < entries.count else { return }
        let now = ContinuousClock.now
        while head < entries.count, entries[head].context.isAnswered || entries[head].deadline <= now {
            if !entries[head].context.isAnswered { entries[head].answer() }
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

/// libmicrohttpd's completion callback: releases the request's context.
func batonRequestCompleted(
    _ cls: UnsafeMutableRawPointer?,
    _ connection: OpaquePointer?,
    _ contextSlot: UnsafeMutablePointer<UnsafeMutableRawPointer?>?,
    _ termination: MHD_RequestTerminationCode
) {
    guard let cls, let contextSlot, let slot = contextSlot.pointee else { return }
    let core = Unmanaged<DaemonContext>.fromOpaque(cls).takeUnretainedValue().core
    // A resumed connection that ended before its response was queued (the client went away) is taken back here.
    if Unmanaged<RequestContext>.fromOpaque(slot).takeUnretainedValue().endSuspension() { core.handlerEnded() }
    Unmanaged<RequestContext>.fromOpaque(slot).release()
    contextSlot.pointee = nil
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
