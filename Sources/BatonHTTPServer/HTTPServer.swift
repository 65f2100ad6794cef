import BatonConcurrency
import BatonErrors
import Foundation
import BatonLogging
internal import CBatonMicroHTTPD

/// Limits and tuning of an ``HTTPServer``.
public struct HTTPServerConfiguration: Sendable {
    /// Largest accepted request body in bytes; larger bodies get 413 `payload_too_large`. Default 64 KiB.
    public var maxBodySize: Int = 64 * 1024
    /// Largest request head (request line, headers and the empty line ending them) in bytes; a larger head is
    /// answered 431 `request_head_too_large` and the connection closed. Default 16 KiB.
    ///
    /// libmicrohttpd's own limit is a connection's memory pool, which also holds the parsed header table and the
    /// response's head, so it is set 8 KiB above this and the server checks the head's size itself; a head too large
    /// even for the pool gets libmicrohttpd's own 431.
    public var maxHeaderSize: Int = 16 * 1024
    /// Seconds of inactivity after which a connection is closed (slow clients are cut off). Default 30.
    public var connectionTimeout: Int = 30
    /// Most connections open at once; further connections wait in the listen backlog until one closes. Default 1,024.
    public var connectionLimit: Int = 1024
    /// Threads polling sockets (libmicrohttpd's thread pool), which also run the routes' blocking handlers;
    /// async handlers run on Swift tasks. Default 1. Not used with ``eventLoops``.
    public var pollingThreads: Int = 1
    /// Event loops serving instead of libmicrohttpd's own threads: each is a thread with its own libmicrohttpd
    /// daemon on the shared port (`SO_REUSEPORT`; the kernel spreads connections over them), polled by an
    /// ``EventLoop`` that its blocking handlers can start work on (``NowOrLater/soon(_:)``, a database statement in
    /// a pipeline, say) which answers in a later round, so one thread keeps many requests in flight without a
    /// wake-up per request. ``connectionLimit`` is shared out between them; ``connectionsPerAddress`` counts across
    /// them. 0 (the default): libmicrohttpd's own threads (``pollingThreads``).
    package var eventLoops: Int = 0
    /// Whether the ``eventLoops`` threads run under Linux's `SCHED_BATCH` policy (see
    /// ``EventLoop/start(name:batchScheduling:setUp:tearDown:)``). Default false.
    package var batchScheduledLoops = false
    /// How long ``HTTPServer/stop()`` waits for in-flight requests before closing connections. Default 10 s.
    public var shutdownTimeout: Duration = .seconds(10)
    /// The longest a handler may run: past it the client is answered 503 `timeout` and the handler's task is
    /// cancelled (its result, when it comes, is dropped). Also bounds how long ``HTTPServer/stop()`` waits for
    /// running handlers. Nil (the default) lets handlers run for ever.
    public var handlerTimeout: Duration? = nil
    /// The longest a client may take from opening a connection (or finishing its previous request) to having
    /// sent a complete request, head and body, however slowly it trickles bytes; past it the connection is
    /// closed. Nil (the default): only ``connectionTimeout``'s inactivity limit applies.
    public var requestHeadTimeout: Duration? = nil
    /// Connections one client address may hold at once, counted across every daemon as libmicrohttpd reports them
    /// opened and closed. One over it waits up to ``addressSlotWait`` for one of its address's connections to close
    /// and hand it a slot; without one by then, it is answered 503 `too_many_connections` with `Retry-After: 1` once
    /// its request is read, and closed. As many as the limit may wait or be refused at once; past those a new
    /// connection is closed unanswered. 0 (the default): no limit.
    public var connectionsPerAddress: Int = 0
    /// How long a connection over ``connectionsPerAddress`` waits for a slot. The server learns of a close only when
    /// the connection's daemon reads it, a little after the client made it (a daemon accepts new connections before
    /// it reads its old ones, and another event loop's daemon may hold them), so a client that closes connections and
    /// opens new ones at once gets its slots back within this wait. ``HTTPServer/stop()`` waits for waiting
    /// connections too. Default 100 ms.
    public var addressSlotWait: Duration = .milliseconds(100)

    /// The defaults above.
    public init() {}
}

/// What went wrong starting a server: a ``HTTPServerErrorCode`` and the address or port involved.
public typealias HTTPServerError = CodedError<HTTPServerErrorCode>

/// Why a server could not start.
public enum HTTPServerErrorCode: String, ErrorCode, CaseIterable {
    /// The host is not a numeric IPv4/IPv6 address or `localhost`.
    case invalidAddress = "invalid_address"
    /// libmicrohttpd could not start (port in use, no permission, bad limits).
    case startFailed = "start_failed"
    /// ``HTTPServer/start(host:port:)`` was called twice.
    case alreadyStarted = "already_started"
}

/// An HTTP/1.1 server on libmicrohttpd answering through a ``Router``.
///
/// libmicrohttpd owns the sockets and parses HTTP on its own polling threads (epoll). When a request's body
/// is complete, a route with a blocking handler answers on that thread, with no hop (the thread may block:
/// it is no thread of Swift's cooperative pool); any other route, or a blocking handler that hands the request
/// on, suspends the connection, runs the handler on a Swift task, and resumes the connection with the response,
/// so no library thread waits on a task. Keep-alive is on. Usage:
///
/// ```swift
/// var router = Router()
/// router.get("/healthz") { _ in .text("ok") }
/// let server = HTTPServer(router: router)
/// let port = try await server.start(host: "127.0.0.1", port: 0)
/// …
/// await server.stop()
/// ```
public actor HTTPServer {
    private let core: ServerCore
    private var daemon: Serving?
    private var stopped = false
    /// Closes connections past the request-head deadline (``ServerCore/sweep()``); nil without a deadline.
    private var sweeper: (any DispatchSourceTimer)?

    /// Creates a stopped server.
    public init(router: Router, configuration: HTTPServerConfiguration = HTTPServerConfiguration(), logger: Logger = .disabled()) {
        core = ServerCore(router: router, configuration: configuration, logger: logger)
    }

    /// The bound port while running, else nil.
    public var port: Int? { daemon.map { Int($0.port) } }

    /// Binds `host:port` and starts serving; returns the port bound (a free one when `port` is 0).
    ///
    /// - Parameter host: a numeric IPv4 or IPv6 address, or `localhost` (127.0.0.1). Default loopback.
    /// - Throws: ``HTTPServerError`` `invalid_address`, `start_failed`, `already_started`.
    @discardableResult
    public func start(host: String = "127.0.0.1", port: Int = 0) throws -> Int {
        guard daemon == nil, !stopped else { throw HTTPServerError(.alreadyStarted, "\(host):\(port)") }
        guard (0...65535).contains(port) else { throw HTTPServerError(.invalidAddress, "port \(port)") }
        let daemon = try Serving.start(core: core, host: host == "localhost" ? "127.0.0.1" : host, port: UInt16(port))
        self.daemon = daemon
        if let limit = core.configuration.requestHeadTimeout {
            // Sweeps every quarter of the deadline, at least every 50 ms and at most every minute.
            let quarter = limit / 4
            let milliseconds = min(60_000, max(50, Int(clamping: quarter.components.seconds) &* 1000 + Int(quarter.components.attoseconds / 1_000_000_000_000_000)))
            let timer = DispatchSource.makeTimerSource(queue: DispatchQueue(label: "baton.http.sweeper"))
            timer.schedule(deadline: .now() + .milliseconds(milliseconds), repeating: .milliseconds(milliseconds))
            timer.setEventHandler { [core] in core.sweep() }
            timer.resume()
            sweeper = timer
        }
        core.logger.info("http server listening", ["host": host, "port": String(daemon.port)])
        return Int(daemon.port)
    }

    /// Stops gracefully: stops accepting connections, lets in-flight requests finish (up to the
    /// configured shutdown timeout), then closes every connection. Running handlers are awaited until
    /// they answer or their ``HTTPServerConfiguration/handlerTimeout`` answers for them, so with a handler
    /// timeout the wait is bounded by the larger of the two limits.
    public func stop() async {
        guard let daemon, !stopped else { return }
        stopped = true
        core.beginStopping()
        daemon.quiesce()
        sweeper?.cancel()
        sweeper = nil
        let deadline = ContinuousClock.now + core.configuration.shutdownTimeout
        while true {
            let (active, running) = core.counts()
            if running == 0 && (active == 0 || ContinuousClock.now >= deadline) { break }
            try? await Task.sleep(for: .milliseconds(5))
        }
        await offPool { daemon.stop() }
        self.daemon = nil
        core.logger.info("http server stopped")
    }
}

/// The daemons serving: one with libmicrohttpd's own threads, or one per event loop.
enum Serving: Sendable {
    case threads(Daemon)
    case loops([(daemon: Daemon, loop: EventLoop)])

    /// Starts the daemons ``HTTPServerConfiguration/eventLoops`` asks for on `host:port`.
    static func start(core: ServerCore, host: String, port: UInt16) throws -> Serving {
        let count = core.configuration.eventLoops
        guard count > 0 else { return .threads(try Daemon(core: core, host: host, port: port)) }
        var started: [(daemon: Daemon, loop: EventLoop)] = []
        do {
            for index in 0..<count {
                // The first binds the port asked for (a free one for 0); the others bind the same one.
                let loop = try EventLoop()
                let serving = ServingLoop(loop)
                let daemon = try Daemon(core: core, host: host, port: started.first?.daemon.port ?? port, polledBy: (serving, count))
                started.append((daemon, loop))
                loop.start(name: "baton.http.loop\(index)", batchScheduling: core.configuration.batchScheduledLoops,
                           setUp: { daemon.attach(to: serving) })
            }
        } catch {
            Serving.loops(started).stop()
            throw error
        }
        return .loops(started)
    }

    var port: UInt16 {
        switch self {
        case .threads(let daemon): return daemon.port
        case .loops(let loops): return loops[0].daemon.port
        }
    }

    /// Stops accepting new connections; existing ones continue.
    func quiesce() {
        switch self {
        case .threads(let daemon): daemon.quiesce()
        case .loops(let loops): for (daemon, loop) in loops { loop.execute { daemon.quiesce() } }
        }
    }

    /// Closes every connection and ends the threads.
    func stop() {
        switch self {
        case .threads(let daemon): daemon.stop()
        case .loops(let loops):
            for (daemon, loop) in loops {
                loop.execute { daemon.stop() }
                loop.stop()
            }
        }
    }
}

/// Owns a libmicrohttpd daemon; `deinit` stops it if ``stop()`` was not called.
final class Daemon: @unchecked Sendable {
    // Safe to share: with libmicrohttpd's own threads, `pointer` is only handed to its thread-safe calls (quiesce,
    // stop) and `stop()` runs once, serialized by the owning actor; a daemon polled by an event loop is only used on
    // that loop's thread.
    private var pointer: OpaquePointer?
    /// The callbacks' `cls`, released when the daemon stops.
    private let retainedContext: Unmanaged<DaemonContext>
    let port: UInt16

    /// Starts a daemon on `host:port`: with libmicrohttpd's own threads, or, when `polledBy` is given, one of `count`
    /// daemons sharing the port, polled by `serving`'s loop (``attach(to:)``), which its callbacks are given.
    init(core: ServerCore, host: String, port: UInt16, polledBy polling: (serving: ServingLoop, count: Int)? = nil) throws {
        retainedContext = Unmanaged.passRetained(DaemonContext(core: core, serving: polling?.serving))
        let context = retainedContext.toOpaque()
        let loops = polling?.count
        let configuration = core.configuration
        let started: OpaquePointer? = try withSocketAddress(host: host, port: port) { address, ipv6 in
            CMicroHTTPD_start_daemon(
                port, address, ipv6 ? 1 : 0,
                batonAccessHandler, context,
                batonRequestCompleted, context,
                batonConnectionNotified,
                UInt32(clamping: max(1, configuration.connectionLimit / (loops ?? 1))),
                UInt32(clamping: configuration.connectionTimeout),
                configuration.maxHeaderSize + 8 * 1024,
                UInt32(clamping: configuration.pollingThreads),
                1024,
                loops == nil ? 0 : 1,
                loops.map { $0 > 1 ? 1 : 0 } ?? 0)
        }
        guard let started else {
            retainedContext.release()
            throw HTTPServerError(.startFailed, "\(host):\(port)")
        }
        pointer = started
        self.port = CMicroHTTPD_bound_port(started)
    }

    /// Has `loop` poll this daemon (call it on the loop's thread): its epoll descriptor is watched, libmicrohttpd
    /// runs when it is ready, when a connection was resumed (``LoopRequests``) or a connection's timeout is due, and
    /// requests started on the loop meet their deadline there.
    func attach(to serving: ServingLoop) {
        guard let pointer else { return }
        let loop = serving.loop, requests = serving.requests
        let descriptor = CMicroHTTPD_epoll_fd(pointer)
        var ranThisRound = false
        let run = { [self] in
            requests.resumed = false
            if let pointer = self.pointer { _ = MHD_run(pointer) }
        }
        loop.watch(descriptor) { _, _ in
            run()
            ranThisRound = true
        }
        loop.sleepLimit = { [self] in
            let limit = requests.sleepLimit(cap: 1000)
            return self.pointer.map { CMicroHTTPD_timeout_ms($0, limit) } ?? limit
        }
        loop.atEndOfRound {
            requests.answerOverdue()
            // Connections resumed this round (a database's results, a task's answer) are answered now, not when the
            // daemon's own wake-up comes round; a round woken by a timeout lets libmicrohttpd close what timed out.
            if requests.resumed || !ranThisRound { run() }
            ranThisRound = false
        }
    }

    /// Stops accepting new connections; existing ones continue.
    func quiesce() {
        guard let pointer else { return }
        let socket = MHD_quiesce_daemon(pointer)
        if socket >= 0 { close(socket) }
    }

    /// Closes every connection and joins libmicrohttpd's threads.
    func stop() {
        guard let pointer else { return }
        self.pointer = nil
        MHD_stop_daemon(pointer)
        retainedContext.release()
    }

    deinit { stop() }
}

/// Calls `body` with a `sockaddr` for `host:port`.
private func withSocketAddress<T>(host: String, port: UInt16, _ body: (UnsafePointer<sockaddr>, Bool) -> T) throws -> T {
    var v4 = sockaddr_in()
    if inet_pton(AF_INET, host, &v4.sin_addr) == 1 {
        v4.sin_family = sa_family_t(AF_INET)
        v4.sin_port = port.bigEndian
        return withUnsafePointer(to: &v4) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { body($0, false) } }
    }
    var v6 = sockaddr_in6()
    if inet_pton(AF_INET6, host, &v6.sin6_addr) == 1 {
        v6.sin6_family = sa_family_t(AF_INET6)
        v6.sin6_port = port.bigEndian
        return withUnsafePointer(to: &v6) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { body($0, true) } }
    }
    throw HTTPServerError(.invalidAddress, host)
}
