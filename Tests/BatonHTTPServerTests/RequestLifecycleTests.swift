import Testing
@testable import BatonHTTPServer

/// Limits small enough to pass in a table: an 8-byte body, a 100-byte head, a 300 ms handler deadline, 4 connections
/// per address.
private let limits = RequestLifecycle.Limits(maxBodySize: 8, maxHeaderSize: 100, handlerTimeout: .milliseconds(300),
                                             connectionsPerAddress: 4)

/// When a connection over its address's limit stops waiting for a slot.
private let waitEnd = ContinuousClock.now + .milliseconds(100)

/// One event of a table: what the access handler, the completion callback, the router, the handler or the loop's
/// round report.
private enum Event {
    case head(size: Int, announced: UInt64? = nil)
    case body(String)
    /// The access handler called with no body data; `answer`: the status of one carried over from another thread.
    case called(answer: Int? = nil)
    case admitted(AddressLimit.Verdict)
    case answeredAtOnce(Int)
    case handlerStarted
    case suspensionRefused
    case handlerAnswered(Int)
    case deadlinePassed
    case completed
}

/// A response as its status and, for an error, its code.
private func describe(_ response: HTTPResponse) -> String {
    let text = String(decoding: response.body, as: UTF8.self)
    guard let start = text.range(of: "\"error\":\"") else { return "\(response.status)" }
    return "\(response.status) " + text[start.upperBound...].prefix { $0 != "\"" }
}

private func describe(_ body: [UInt8]?) -> String {
    body.map { "\"" + String(decoding: $0, as: UTF8.self) + "\"" } ?? "(too large)"
}

private func describe(_ state: RequestLifecycle.State) -> String {
    switch state {
    case .started: "started"
    case .receiving(let body): "receiving \(describe(body))"
    case .bodyTooLarge: "body too large"
    case .refusedAtHead: "refused at head"
    case .admitting(let body): "admitting \(describe(body))"
    case .waitingForSlot(let body): "waiting for slot \(describe(body))"
    case .routing: "routing"
    case .handling: "handling"
    case .resuming(let response): "resuming \(describe(response))"
    case .answered: "answered"
    case .completed: "completed"
    }
}

private func describe(_ action: RequestLifecycle.Action) -> String {
    switch action {
    case .proceed: "proceed"
    case .admit: "admit"
    case .queue(let response, let closing): "queue \(describe(response))" + (closing ? ", closing" : "")
    case .route(let body): "route \(describe(body))"
    case .suspendForHandler: "suspend for handler"
    case .suspendForSlot(let until): "suspend for slot" + (until == waitEnd ? " until the wait's end" : " until another time")
    }
}

private func describe(_ resumption: RequestLifecycle.Resumption) -> String {
    switch resumption {
    case .none: "drop"
    case .resume: "resume"
    case .timeOut: "time out"
    }
}

/// Feeds each row's event to one lifecycle, in order, and expects its actions and the state it leads to.
private func check(_ rows: [(Event, actions: String, state: String)], limits: RequestLifecycle.Limits = limits,
                   sourceLocation: SourceLocation = #_sourceLocation) {
    var lifecycle = RequestLifecycle(limits: limits)
    for (index, (event, expected, state)) in rows.enumerated() {
        let actions: String
        switch event {
        case .head(let size, let announced):
            actions = describe(lifecycle.headReceived(headSize: size, announcedBodySize: announced))
        case .body(let text):
            lifecycle.bodyReceived(Array(text.utf8))
            actions = "-"
        case .called(let answer):
            let (tookBack, action) = lifecycle.called(answer: answer.map { HTTPResponse(status: $0) })
            actions = (tookBack ? "took back, " : "") + describe(action)
        case .admitted(let verdict): actions = describe(lifecycle.admitted(verdict))
        case .answeredAtOnce(let status): actions = describe(lifecycle.answeredAtOnce(HTTPResponse(status: status)))
        case .handlerStarted: actions = describe(lifecycle.handlerStarted())
        case .suspensionRefused: actions = describe(lifecycle.suspensionRefused())
        case .handlerAnswered(let status): actions = describe(lifecycle.handlerAnswered(HTTPResponse(status: status)))
        case .deadlinePassed: actions = describe(lifecycle.deadlinePassed())
        case .completed: actions = lifecycle.completed() ? "took back" : "-"
        }
        #expect(actions == expected, "row \(index + 1): actions", sourceLocation: sourceLocation)
        #expect(describe(lifecycle.state) == state, "row \(index + 1): state", sourceLocation: sourceLocation)
    }
}

/// A request with the body `ab` read, admitted and routed.
private var routed: [(Event, actions: String, state: String)] {
    [(.head(size: 60), "proceed", "receiving \"\""),
     (.body("ab"), "-", "receiving \"ab\""),
     (.called(), "admit", "admitting \"ab\""),
     (.admitted(.serve), "route \"ab\"", "routing")]
}

/// The same, its connection suspended for a handler that answers later.
private var handling: [(Event, actions: String, state: String)] {
    routed + [(.handlerStarted, "suspend for handler", "handling")]
}

@Suite("HTTP request lifecycle, as tables without a server")
struct RequestLifecycleTests {
    @Test("a request within its limits is read in chunks, admitted, routed and answered at once; nothing follows its answer")
    func answeredAtOnce() {
        check([
            (.head(size: 100, announced: 8), "proceed", "receiving \"\""),
            (.body("abcd"), "-", "receiving \"abcd\""),
            (.body("efgh"), "-", "receiving \"abcdefgh\""),
            (.called(), "admit", "admitting \"abcdefgh\""),
            (.admitted(.serve), "route \"abcdefgh\"", "routing"),
            (.answeredAtOnce(200), "queue 200", "answered"),
            (.called(), "proceed", "answered"),
            (.handlerAnswered(201), "drop", "answered"),
            (.deadlinePassed, "drop", "answered"),
            (.completed, "-", "completed"),
        ])
    }

    @Test("a head over its limit is answered 431 and the connection closed; the body that follows is ignored")
    func headTooLarge() {
        check([
            (.head(size: 101), "queue 431 request_head_too_large, closing", "refused at head"),
            (.body("ignored"), "-", "refused at head"),
            (.called(), "proceed", "refused at head"),
            (.completed, "-", "completed"),
        ])
    }

    @Test("a body announced over the limit is answered 413 with the head, before it is read, and the connection closed")
    func announcedBodyTooLarge() {
        check([
            (.head(size: 60, announced: 9), "queue 413 payload_too_large, closing", "refused at head"),
            (.body("abcdefghi"), "-", "refused at head"),
            (.called(), "proceed", "refused at head"),
        ])
    }

    @Test("a body that passes the limit as it arrives is dropped, and answered 413 once read, the connection kept")
    func bodyTooLarge() {
        check([
            (.head(size: 60), "proceed", "receiving \"\""),
            (.body("abcde"), "-", "receiving \"abcde\""),
            (.body("fghi"), "-", "body too large"),
            (.body("j"), "-", "body too large"),
            (.called(), "admit", "admitting (too large)"),
            (.admitted(.serve), "queue 413 payload_too_large", "answered"),
            (.completed, "-", "completed"),
        ])
    }

    @Test("the address limit's refusal comes before a body's size: 503 too_many_connections, closed")
    func refusedOverAddressLimit() {
        check([
            (.head(size: 60), "proceed", "receiving \"\""),
            (.body("abcdefghi"), "-", "body too large"),
            (.called(), "admit", "admitting (too large)"),
            (.admitted(.refuse), "queue 503 too_many_connections, closing", "answered"),
        ])
    }

    @Test("a handler's answer resumes the connection once; a second answer and the deadline after it are dropped; the resumed connection is taken back with the first answer")
    func handlerAnswers() {
        check(handling + [
            (.handlerAnswered(201), "resume", "resuming 201"),
            (.handlerAnswered(202), "drop", "resuming 201"),
            (.deadlinePassed, "drop", "resuming 201"),
            (.called(), "took back, queue 201", "answered"),
            // The deadline passing after the answer was queued, and a late answer, change nothing.
            (.deadlinePassed, "drop", "answered"),
            (.handlerAnswered(202), "drop", "answered"),
            (.completed, "-", "completed"),
        ])
    }

    @Test("the deadline answers 503 timeout first: the handler's late answer is dropped")
    func deadlineFirst() {
        check(handling + [
            (.deadlinePassed, "time out", "resuming 503 timeout"),
            (.handlerAnswered(201), "drop", "resuming 503 timeout"),
            (.called(), "took back, queue 503 timeout", "answered"),
            (.completed, "-", "completed"),
        ])
    }

    @Test("without a handler deadline, its passing answers nothing")
    func noDeadline() {
        var untimed = limits
        untimed.handlerTimeout = nil
        check(handling + [
            (.deadlinePassed, "drop", "handling"),
            (.handlerAnswered(201), "resume", "resuming 201"),
        ], limits: untimed)
    }

    @Test("with libmicrohttpd's own threads, the answer given on another thread comes with the call that takes the connection back")
    func answerCarriedOver() {
        check(handling + [
            (.called(answer: 201), "took back, queue 201", "answered"),
            (.completed, "-", "completed"),
        ])
        // Taken back without one (it is resumed only once answered): the client still gets an answer.
        check(handling + [(.called(), "took back, queue 500 internal_error", "answered")])
    }

    @Test("the client gone while the handler runs: the completion takes the connection back, and what comes after is dropped")
    func clientGoneWhileHandling() {
        // Resumed from another thread, then found closed: no call of the access handler comes.
        check(handling + [
            (.completed, "took back", "completed"),
            (.handlerAnswered(201), "drop", "completed"),
            (.deadlinePassed, "drop", "completed"),
            (.called(), "proceed", "completed"),
        ])
        // Resumed by the loop with its answer, then found closed.
        check(handling + [
            (.handlerAnswered(201), "resume", "resuming 201"),
            (.completed, "took back", "completed"),
        ])
    }

    @Test("a request that must wait for a handler while the server stops is answered 503 shutting_down, never suspended")
    func stoppingBeforeSuspension() {
        check(handling + [
            (.suspensionRefused, "queue 503 shutting_down", "answered"),
            (.handlerAnswered(201), "drop", "answered"),
            (.deadlinePassed, "drop", "answered"),
            (.completed, "-", "completed"),
        ])
    }

    @Test("a connection over its address's limit waits for a slot, suspended, then is admitted again: served, refused, or cut short")
    func waitsForSlot() {
        let waiting: [(Event, actions: String, state: String)] = [
            (.head(size: 60), "proceed", "receiving \"\""),
            (.body("ab"), "-", "receiving \"ab\""),
            (.called(), "admit", "admitting \"ab\""),
            (.admitted(.wait(until: waitEnd)), "suspend for slot until the wait's end", "waiting for slot \"ab\""),
            // No handler runs: an answer or a deadline cannot reach it.
            (.handlerAnswered(201), "drop", "waiting for slot \"ab\""),
            (.deadlinePassed, "drop", "waiting for slot \"ab\""),
        ]
        check(waiting + [
            (.called(), "took back, admit", "admitting \"ab\""),
            (.admitted(.serve), "route \"ab\"", "routing"),
            (.answeredAtOnce(200), "queue 200", "answered"),
        ])
        check(waiting + [
            (.called(), "took back, admit", "admitting \"ab\""),
            (.admitted(.refuse), "queue 503 too_many_connections, closing", "answered"),
        ])
        check(waiting + [(.completed, "took back", "completed")])
        // Refused before it is suspended: the server stops.
        check(Array(waiting.prefix(4)) + [(.suspensionRefused, "queue 503 shutting_down", "answered")])
    }

    @Test("events out of their place change nothing")
    func outOfPlace() {
        check([
            (.called(), "proceed", "started"),
            (.body("ab"), "-", "started"),
            (.admitted(.serve), "proceed", "started"),
            (.handlerStarted, "proceed", "started"),
            (.suspensionRefused, "proceed", "started"),
            (.answeredAtOnce(200), "proceed", "started"),
            (.head(size: 60), "proceed", "receiving \"\""),
            (.head(size: 60), "proceed", "receiving \"\""),
            (.answeredAtOnce(200), "proceed", "receiving \"\""),
        ])
        check(handling + [
            (.answeredAtOnce(200), "proceed", "handling"),
            (.handlerStarted, "proceed", "handling"),
            (.body("more"), "-", "handling"),
        ])
    }
}
