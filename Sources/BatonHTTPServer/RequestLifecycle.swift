/// One HTTP request's way through the server, as a value: from the head libmicrohttpd reports to the completion it
/// reports, with the body, the limits, the connection's suspension for a handler or for an address slot, the answer
/// and the deadline. Events go in (what libmicrohttpd, the address limit, the router, the handler and the loop's
/// deadline report); what to do comes out (an ``Action``, or a ``Resumption``). It calls nothing, neither
/// libmicrohttpd nor the router nor a clock, so tables of events and actions test it without a server; the access
/// handler (`Connection.swift`) turns callbacks into events and performs the actions.
///
/// It lives on the thread that polls its connection (an event loop's, or the libmicrohttpd thread that owns the
/// connection) and is touched nowhere else. The rules it keeps: a request is answered once; a suspended connection
/// is taken back by libmicrohttpd once (``called(answer:)`` or ``completed()`` says so, and only then does its
/// handler stop counting as running); a body over the limit is dropped as it arrives and answered 413 once read; an
/// answer or a deadline that comes after the request was answered, or after it ended, is dropped.
struct RequestLifecycle {
    /// The limits a request is held to (from ``HTTPServerConfiguration``).
    struct Limits: Equatable {
        var maxBodySize: Int
        var maxHeaderSize: Int
        var handlerTimeout: Duration?
        var connectionsPerAddress: Int

        init(maxBodySize: Int, maxHeaderSize: Int, handlerTimeout: Duration?, connectionsPerAddress: Int) {
            self.maxBodySize = maxBodySize
            self.maxHeaderSize = maxHeaderSize
            self.handlerTimeout = handlerTimeout
            self.connectionsPerAddress = connectionsPerAddress
        }

        init(_ configuration: HTTPServerConfiguration) {
            self.init(maxBodySize: configuration.maxBodySize, maxHeaderSize: configuration.maxHeaderSize,
                      handlerTimeout: configuration.handlerTimeout, connectionsPerAddress: configuration.connectionsPerAddress)
        }
    }

    /// Where the request is.
    enum State: Equatable {
        /// Made for a request whose head libmicrohttpd is about to report.
        case started
        /// Its head read, its body arriving within the limit.
        case receiving(body: [UInt8])
        /// Its body passed the limit: dropped as it arrives, answered 413 once read.
        case bodyTooLarge
        /// Answered at its head (431, or 413 for an announced body over the limit); the rest of it is ignored.
        case refusedAtHead
        /// Read, waiting for the address limit's verdict (``admitted(_:)``); nil: the body was too large.
        case admitting(body: [UInt8]?)
        /// Suspended: over its address's limit, waiting for a slot; libmicrohttpd calls again once it is resumed.
        case waitingForSlot(body: [UInt8]?)
        /// Routed: the router's answer is awaited (``answeredAtOnce(_:)``, or ``handlerStarted()``).
        case routing
        /// Suspended while its handler runs, no answer on this thread yet.
        case handling
        /// Answered (by the handler or its deadline) while suspended; the connection is being resumed and
        /// libmicrohttpd calls again to have the answer queued.
        case resuming(HTTPResponse)
        /// A response is queued; libmicrohttpd sends it.
        case answered
        /// libmicrohttpd ended the request (sent, or the client went away).
        case completed
    }

    /// What the access handler does for an event.
    enum Action: Equatable {
        /// Nothing: libmicrohttpd goes on (reads more, or sends what is queued).
        case proceed
        /// Ask the connection's address limit whether it is served, and report the verdict (``admitted(_:)``).
        case admit
        /// Queue `response`; with `closing`, libmicrohttpd closes the connection once it is sent.
        case queue(HTTPResponse, closing: Bool)
        /// Route the request with `body`; report the router's answer (``answeredAtOnce(_:)``) or that it handed the
        /// request to work that answers later (``handlerStarted()``).
        case route(body: [UInt8])
        /// Count the handler as running and suspend the connection, then start the handler's work; if the server
        /// is stopping, uncount it and report ``suspensionRefused()`` instead.
        case suspendForHandler
        /// Count the wait as a running handler and suspend the connection until the address has a slot or `until`
        /// passes; if the server is stopping, uncount it and report ``suspensionRefused()`` instead.
        case suspendForSlot(until: ContinuousClock.Instant)
    }

    /// What to do when an answer, or the deadline, reaches the loop while the connection is suspended for a handler.
    enum Resumption: Equatable {
        /// Nothing: the request was answered already, or ended (a second answer, a late one, a deadline past an
        /// answer); it is dropped.
        case none
        /// Resume the connection: its answer is ready, and libmicrohttpd calls again to have it queued.
        case resume
        /// The deadline answered: log it, cancel the handler's task, resume the connection.
        case timeOut
    }

    private(set) var state: State = .started
    let limits: Limits

    /// A lifecycle in ``State/started``.
    init(limits: Limits) {
        self.limits = limits
    }

    /// Whether it waits for its handler's answer (a deadline still matters).
    var awaitsAnswer: Bool {
        if case .handling = state { true } else { false }
    }

    /// libmicrohttpd parsed the head: `headSize` bytes, and the body's announced size if any. A head or an announced
    /// body over its limit is answered at once and the connection closed after it.
    mutating func headReceived(headSize: Int, announcedBodySize: UInt64?) -> Action {
        guard case .started = state else { return .proceed }
        if headSize > limits.maxHeaderSize {
            state = .refusedAtHead
            return .queue(HTTPError.requestHeadTooLarge(limit: limits.maxHeaderSize).response, closing: true)
        }
        if let announced = announcedBodySize, announced > UInt64(limits.maxBodySize) {
            state = .refusedAtHead
            return .queue(HTTPError.payloadTooLarge(limit: limits.maxBodySize).response, closing: true)
        }
        state = .receiving(body: [])
        return .proceed
    }

    /// A chunk of the body arrived (libmicrohttpd is told it was consumed whatever the state). Kept while the body
    /// stays within the limit; past it, the body is dropped.
    mutating func bodyReceived<Chunk: Collection<UInt8>>(_ chunk: Chunk) {
        guard case .receiving(var body) = state else { return }
        // Out of the state while it grows, so the append does not copy it.
        state = .bodyTooLarge
        guard body.count + chunk.count <= limits.maxBodySize else { return }
        body.append(contentsOf: chunk)
        state = .receiving(body: body)
    }

    /// libmicrohttpd called with no body data: the request is read, or libmicrohttpd took back a connection it
    /// suspended. `answer` is one given on another thread and carried over with the connection's resumption (with
    /// libmicrohttpd's own threads, which nothing else can run on). `tookBack`: a suspension ended, so the handler
    /// (or the wait for a slot) stops counting as running.
    mutating func called(answer: HTTPResponse?) -> (tookBack: Bool, action: Action) {
        switch state {
        case .receiving(let body):
            state = .admitting(body: body)
            return (false, .admit)
        case .bodyTooLarge:
            state = .admitting(body: nil)
            return (false, .admit)
        case .waitingForSlot(let body):
            state = .admitting(body: body)
            return (true, .admit)
        case .handling:
            // Resumed with the answer carried over; without one (never resumed so) the client still gets an answer.
            state = .answered
            return (true, .queue(answer ?? HTTPError.internalError.response, closing: false))
        case .resuming(let response):
            state = .answered
            return (true, .queue(response, closing: false))
        case .started, .refusedAtHead, .admitting, .routing, .answered, .completed:
            return (false, .proceed)
        }
    }

    /// The address limit's verdict on a request read: served (routed, or 413 when its body was too large), refused
    /// (503 `too_many_connections`, then closed), or left waiting for a slot.
    mutating func admitted(_ verdict: AddressLimit.Verdict) -> Action {
        guard case .admitting(let body) = state else { return .proceed }
        switch verdict {
        case .serve:
            guard let body else {
                state = .answered
                return .queue(HTTPError.payloadTooLarge(limit: limits.maxBodySize).response, closing: false)
            }
            state = .routing
            return .route(body: body)
        case .refuse:
            state = .answered
            return .queue(HTTPError.tooManyConnections(limit: limits.connectionsPerAddress).response, closing: true)
        case .wait(let until):
            state = .waitingForSlot(body: body)
            return .suspendForSlot(until: until)
        }
    }

    /// The router answered at once, on this thread: queued.
    mutating func answeredAtOnce(_ response: HTTPResponse) -> Action {
        guard case .routing = state else { return .proceed }
        state = .answered
        return .queue(response, closing: false)
    }

    /// The router handed the request to work that answers later (on the loop or on a task).
    mutating func handlerStarted() -> Action {
        guard case .routing = state else { return .proceed }
        state = .handling
        return .suspendForHandler
    }

    /// The server is stopping, so the connection cannot be suspended (``HTTPServer/stop()`` may already have found
    /// no handler running): answered 503 `shutting_down` at once; the handler's work is never started.
    mutating func suspensionRefused() -> Action {
        switch state {
        case .handling, .waitingForSlot:
            state = .answered
            return .queue(HTTPError.shuttingDown.response, closing: false)
        default:
            return .proceed
        }
    }

    /// The handler's answer reached the loop while the connection is suspended: resumed to queue it. A second
    /// answer, or one after the deadline answered or the request ended, is dropped.
    mutating func handlerAnswered(_ response: HTTPResponse) -> Resumption {
        guard case .handling = state else { return .none }
        state = .resuming(response)
        return .resume
    }

    /// The handler's deadline passed (kept by the loop's rounds): a request still waiting for its handler is
    /// answered 503 `timeout`; one answered or ended already is left alone.
    mutating func deadlinePassed() -> Resumption {
        guard case .handling = state, let timeout = limits.handlerTimeout else { return .none }
        state = .resuming(HTTPError.timeout(after: timeout).response)
        return .timeOut
    }

    /// libmicrohttpd ended the request (sent, or the client went away, possibly while its handler ran). True when the
    /// connection was suspended and not taken back yet: its handler (or wait) stops counting as running.
    mutating func completed() -> Bool {
        defer { state = .completed }
        switch state {
        case .waitingForSlot, .handling, .resuming: return true
        default: return false
        }
    }
}
