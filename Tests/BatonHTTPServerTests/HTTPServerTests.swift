import Foundation
import FoundationNetworking
import BatonBench
import BatonConcurrency
import BatonErrors
import BatonRawHTTP
import TestSupport
import Testing
@testable import BatonHTTPServer

/// Sends one request with URLSession and returns status, headers and body text.
func fetch(_ port: Int, _ path: String, method: String = "GET", headers: [String: String] = [:], body: Data? = nil) async throws -> (Int, HTTPURLResponse, String) {
    var request = URLRequest(url: URL(string: "http://127.0.0.1:\(port)\(path)")!)
    request.httpMethod = method
    request.httpBody = body
    for (name, value) in headers { request.setValue(value, forHTTPHeaderField: name) }
    let (data, response) = try await URLSession.shared.data(for: request)
    let http = response as! HTTPURLResponse
    return (http.statusCode, http, String(decoding: data, as: UTF8.self))
}

func echoRouter() -> Router {
    var router = Router()
    router.get("/hello") { request in
        .text("hello \(request.query["name"] ?? "nobody") from \(request.remoteAddress ?? "?")")
    }
    router.post("/form") { request in
        let form = try request.formValues()
        return try .json(encoding: form)
    }
    router.post("/echo") { request in
        HTTPResponse(status: 201, headers: ["X-Seen-Type": request.headers["content-TYPE"] ?? "none"], body: request.body)
    }
    router.get("/teapot") { _ in throw HTTPError(418, code: "teapot", reason: "short and stout", headers: ["Retry-After": "7"]) }
    router.get("/coded") { _ in throw CodedError(EchoErrorCode.gone, "it left") }
    router.get("/crash") { _ in throw CocoaError(.fileReadNoPermission, userInfo: ["path": "/secret/internal/path"]) }
    return router
}

/// A code whose errors the echo router throws: any ``CodedError`` answers with its code's own status.
enum EchoErrorCode: String, HTTPStatusCode {
    case gone
    var httpStatus: Int { 410 }
}

/// A configuration serving with libmicrohttpd's own threads (`loops` 0) or with that many event loops, and at most
/// `connectionsPerAddress` connections per client address (0: no limit).
func serving(loops: Int, connectionsPerAddress: Int = 0) -> HTTPServerConfiguration {
    var configuration = HTTPServerConfiguration()
    configuration.eventLoops = loops
    configuration.connectionsPerAddress = connectionsPerAddress
    return configuration
}

@Suite("HTTPServer over loopback")
struct HTTPServerTests {
    @Test("port 0 binds a free port and two servers get different ports")
    func freePorts() async throws {
        let first = HTTPServer(router: Router()), second = HTTPServer(router: Router())
        let a = try await first.start(port: 0), b = try await second.start(port: 0)
        #expect(a > 0 && b > 0 && a != b)
        #expect(await first.port == a)
        await first.stop(); await second.stop()
        #expect(await first.port == nil)
    }

    @Test("GET with query, remote address", arguments: [0, 2])
    func getWithQuery(loops: Int) async throws {
        try await withServer(echoRouter(), configuration: serving(loops: loops)) { _, port in
            let (status, response, body) = try await fetch(port, "/hello?name=J%C3%BCrgen+x&name=second")
            #expect(status == 200)
            #expect(response.value(forHTTPHeaderField: "Content-Type") == "text/plain; charset=utf-8")
            #expect(body == "hello Jürgen x from 127.0.0.1")
        }
    }

    @Test("POST form values are decoded; request headers are case-insensitive")
    func postForm() async throws {
        try await withServer(echoRouter()) { _, port in
            let (status, _, body) = try await fetch(port, "/form", method: "POST",
                headers: ["Content-Type": "application/x-www-form-urlencoded"],
                body: Data("grant_type=client_credentials&scope=user.migration&client_id=com.example%2Bapp&empty=".utf8))
            #expect(status == 200)
            #expect(body == #"{"client_id":"com.example+app","empty":"","grant_type":"client_credentials","scope":"user.migration"}"#)
            let (echoStatus, echo, echoBody) = try await fetch(port, "/echo", method: "POST", headers: ["content-type": "application/json"], body: Data("{\"a\":1}".utf8))
            #expect(echoStatus == 201)
            #expect(echo.value(forHTTPHeaderField: "x-seen-type") == "application/json")
            #expect(echoBody == "{\"a\":1}")
        }
    }

    @Test("unknown path is 404, wrong method is 405 with Allow, both as JSON errors")
    func notFoundAndMethod() async throws {
        try await withServer(echoRouter()) { _, port in
            let (status, _, body) = try await fetch(port, "/nope")
            #expect(status == 404)
            #expect(body == #"{"error":"not_found","reason":"no such route"}"#)
            let (status405, response, body405) = try await fetch(port, "/form", method: "PUT", body: Data())
            #expect(status405 == 405)
            #expect(response.value(forHTTPHeaderField: "Allow") == "POST")
            #expect(body405.contains("\"error\":\"method_not_allowed\""))
        }
    }

    @Test("HTTPError and CodedError choose status, code and headers; other errors give a bare 500")
    func errors() async throws {
        try await withServer(echoRouter()) { _, port in
            let (status, response, body) = try await fetch(port, "/teapot")
            #expect(status == 418)
            #expect(response.value(forHTTPHeaderField: "Retry-After") == "7")
            #expect(response.value(forHTTPHeaderField: "Content-Type") == "application/json")
            #expect(body == #"{"error":"teapot","reason":"short and stout"}"#)
            let (coded, _, codedBody) = try await fetch(port, "/coded")
            #expect(coded == 410)
            #expect(codedBody == #"{"error":"gone","reason":"it left"}"#)
            let (crash, _, crashBody) = try await fetch(port, "/crash")
            #expect(crash == 500)
            #expect(crashBody == #"{"error":"internal_error","reason":"internal server error"}"#)
            #expect(!crashBody.contains("secret"))
        }
    }

    @Test("a body over the limit is 413, announced or chunked", arguments: [0, 2])
    func bodyLimit(loops: Int) async throws {
        var configuration = serving(loops: loops)
        configuration.maxBodySize = 1024
        try await withServer(echoRouter(), configuration: configuration) { _, port in
            let (ok, _, okBody) = try await fetch(port, "/echo", method: "POST", body: Data(repeating: 65, count: 1024))
            #expect(ok == 201 && okBody.count == 1024)
            let (status, _, body) = try await fetch(port, "/echo", method: "POST", body: Data(repeating: 65, count: 1025))
            #expect(status == 413)
            #expect(body.contains("payload_too_large"))

            let chunkedStatus = try await offPool { () -> Int? in
                let socket = try RawHTTPConnection.open(port: port)
                let chunk = String(repeating: "B", count: 800)
                try socket.send("POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n320\r\n\(chunk)\r\n320\r\n\(chunk)\r\n0\r\n\r\n")
                return socket.response()?.status
            }
            #expect(chunkedStatus == 413)
        }
    }

    @Test("defaults: 64 KiB body, 16 KiB head, 30 s timeout, 1,024 connections")
    func defaults() {
        let configuration = HTTPServerConfiguration()
        #expect(configuration.maxBodySize == 65_536)
        #expect(configuration.maxHeaderSize == 16_384)
        #expect(configuration.connectionTimeout == 30)
        #expect(configuration.connectionLimit == 1_024)
    }

    @Test("keep-alive: several requests on one connection", arguments: [0, 2])
    func keepAlive(loops: Int) async throws {
        try await withServer(echoRouter(), configuration: serving(loops: loops)) { _, port in
            let bodies = try await offPool { () -> [String?] in
                let socket = try RawHTTPConnection.open(port: port)
                var bodies: [String?] = []
                for index in 0..<5 {
                    try socket.send("GET /hello?name=n\(index) HTTP/1.1\r\nHost: x\r\n\r\n")
                    bodies.append(socket.response()?.body)
                }
                try socket.send("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc")
                bodies.append(socket.response()?.body)
                return bodies
            }
            #expect(bodies == (0..<5).map { "hello n\($0) from 127.0.0.1" } + ["abc"])
        }
    }

    @Test("a request head of 16 KiB is served and one byte more is refused with 431, however far past the limit",
          arguments: [0, 2])
    func headerLimit(loops: Int) async throws {
        try await withServer(echoRouter(), configuration: serving(loops: loops)) { _, port in
            // Sizes count the request line, the header lines and the empty line. Past the connection's memory pool (24,500
            // bytes and more) the 431 is libmicrohttpd's own, before the server sees the head.
            let answers = try await offPool { () -> [(size: Int, status: Int?, body: String?, closed: Bool)] in
                try [16_383, 16_384, 16_385, 20_000, 24_500, 40_000].map { size in
                    let socket = try RawHTTPConnection.open(port: port, timeoutMilliseconds: 10_000)
                    try socket.send(paddedHead(size))
                    let response = socket.response()
                    return (size, response?.status, response?.body, response?.status == 431 && socket.isClosedByServer())
                }
            }
            for answer in answers where answer.size <= 16_384 {
                #expect(answer.status == 200, "\(answer.size) bytes")
            }
            for answer in answers where answer.size > 16_384 {
                #expect(answer.status == 431, "\(answer.size) bytes")
                #expect(answer.closed, "\(answer.size) bytes")
            }
            #expect(answers.filter { (16_385...20_000).contains($0.size) }.allSatisfy { $0.body?.contains("\"error\":\"request_head_too_large\"") == true })
            // The limit is per request: a kept-alive connection may send head after head of the limit's size.
            let keptAlive = try await offPool { () -> [Int?] in
                let socket = try RawHTTPConnection.open(port: port, timeoutMilliseconds: 10_000)
                return try (0..<3).map { _ in
                    try socket.send(paddedHead(16_384))
                    return socket.response()?.status
                }
            }
            #expect(keptAlive == [200, 200, 200])
        }
    }

    @Test("a slow client is cut off after the connection timeout", arguments: [0, 2])
    func slowClient(loops: Int) async throws {
        var configuration = serving(loops: loops)
        configuration.connectionTimeout = 1
        try await withServer(echoRouter(), configuration: configuration) { _, port in
            let closed = try await offPool { () -> Bool in
                let socket = try RawHTTPConnection.open(port: port)
                try socket.send("GET /hello HTTP/1.1\r\nHost: x\r\n")
                return socket.isClosedByServer()
            }
            #expect(closed)
        }
    }

    @Test("a client trickling its request head is cut off at the request-head deadline, whatever the idle timeout",
          arguments: [0, 2])
    func requestHeadDeadline(loops: Int) async throws {
        var configuration = serving(loops: loops)
        configuration.connectionTimeout = 30
        configuration.requestHeadTimeout = .seconds(1)
        try await withServer(echoRouter(), configuration: configuration) { _, port in
            // A request in time is answered, and so is the next one on the same connection.
            let answered = try await offPool { () -> [String?] in
                let socket = try RawHTTPConnection.open(port: port)
                try socket.send("GET /hello?name=a HTTP/1.1\r\nHost: x\r\n\r\n")
                let first = socket.response()?.body
                try socket.send("GET /hello?name=b HTTP/1.1\r\nHost: x\r\n\r\n")
                return [first, socket.response()?.body]
            }
            #expect(answered == ["hello a from 127.0.0.1", "hello b from 127.0.0.1"])
            let seconds = try await offPool { () -> Double? in
                let socket = try RawHTTPConnection.open(port: port)
                let start = ContinuousClock.now
                try socket.send("GET /hello HTTP/1.1\r\nHost: x\r\n")
                for _ in 0..<40 {
                    // One byte every 200 ms: never idle long enough for the 30 s inactivity limit.
                    guard (try? socket.send("X")) != nil else { break }
                    if socket.isReadable(within: 200) { break }
                }
                guard socket.isClosedByServer() else { return nil }
                let elapsed = ContinuousClock.now - start
                return Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
            }
            #expect(seconds != nil)
            #expect((seconds ?? 99) < 4)
        }
    }

    @Test("a handler past its deadline is answered 503 timeout, and stop does not wait for it", arguments: [0, 2])
    func handlerDeadline(loops: Int) async throws {
        var router = Router()
        router.get("/stuck") { _ in
            // Ignores cancellation, like a statement waiting on a lock (off the cooperative pool).
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                DispatchQueue.global().asyncAfter(deadline: .now() + 5) { continuation.resume() }
            }
            return .text("late")
        }
        // Work started on the event loop that never reports back: the loop's round answers it at the deadline.
        router.on("GET", "/stuck-on-loop", onLoop: { _, _ in .soon { _ in } })
        var configuration = serving(loops: loops)
        configuration.handlerTimeout = .milliseconds(300)
        let server = HTTPServer(router: router, configuration: configuration)
        let port = try await server.start(port: 0)
        for path in loops > 0 ? ["/stuck", "/stuck-on-loop"] : ["/stuck"] {
            let start = ContinuousClock.now
            let (status, response, body) = try await fetch(port, path)
            #expect(status == 503, "\(path)")
            #expect(body.contains("\"error\":\"timeout\""))
            #expect(response.value(forHTTPHeaderField: "Retry-After") == "1")
            #expect(ContinuousClock.now - start < .seconds(3))
        }
        async let stuck = fetch(port, "/stuck")
        try await Task.sleep(for: .milliseconds(100))
        let stopping = ContinuousClock.now
        await server.stop()
        #expect(ContinuousClock.now - stopping < .seconds(3))
        #expect(try await stuck.0 == 503)
    }

    @Test("a loop route answers on the thread that received the request, hands the request to a task, or (on an event loop, given in its context) starts work that answers in a later round; in-process callers run the same handler without a loop",
          arguments: [0, 2])
    func blockingRoutes(loops: Int) async throws {
        var router = Router()
        // `now` answers on the polling thread; `later` hands on; `soon` reports back to the loop from another
        // thread, with a response, async work, or a failure; errors thrown any way become responses.
        router.on("POST", "/mode", onLoop: { request, context in
            let mode = String(decoding: request.body, as: UTF8.self)
            let onLoop = { (outcome: Result<NowOrLater<HTTPResponse>, any Error>) -> NowOrLater<HTTPResponse> in
                guard let loop = context.loop else { return .now(.text("no event loop")) }
                return .soon { deliver in
                    DispatchQueue.global().asyncAfter(deadline: .now() + .milliseconds(20)) {
                        loop.execute { deliver(EventLoop.current === loop ? outcome : .success(.now(.text("another thread")))) }
                    }
                }
            }
            switch mode {
            case "now": return .now(.text("now on \(Thread.isMainThread ? "main" : "a server thread")"))
            case "later": return .later { .text("later on a task") }
            case "throw-now": throw HTTPError(409, code: "now_refused", reason: "refused at once")
            case "soon": return onLoop(.success(.now(.text("soon on the loop"))))
            case "soon-later": return onLoop(.success(.later { .text("later after the loop") }))
            case "soon-throw": return onLoop(.failure(HTTPError(411, code: "loop_refused", reason: "refused on the loop")))
            default: return .later { throw HTTPError(410, code: "later_refused", reason: "refused on the task") }
            }
        })
        var configuration = serving(loops: loops)
        configuration.pollingThreads = 2
        try await withServer(router, configuration: configuration) { _, port in
            var cases = [("now", 200, "now on a server thread"), ("later", 200, "later on a task"),
                         ("throw-now", 409, "now_refused"), ("throw-later", 410, "later_refused")]
            if loops > 0 {
                cases += [("soon", 200, "soon on the loop"), ("soon-later", 200, "later after the loop"),
                          ("soon-throw", 411, "loop_refused")]
            }
            for (mode, status, body) in cases {
                let (answer, _, text) = try await fetch(port, "/mode", method: "POST", body: Data(mode.utf8))
                #expect(answer == status, "\(mode)")
                #expect(text.contains(body), "\(mode): \(text)")
            }
            // Work answered on another thread wakes the server at once (not at its next timeout).
            let started = ContinuousClock.now
            for _ in 0..<20 { _ = try await fetch(port, "/mode", method: "POST", body: Data("later".utf8)) }
            #expect(ContinuousClock.now - started < .seconds(2), "20 answers from tasks took \(ContinuousClock.now - started)")
            // The other methods of the path and unknown paths answer as for any route.
            #expect(try await fetch(port, "/mode").0 == 405)
        }
        // In process, the same handler runs with no event loop in its context.
        let inProcess = await router.respond(to: HTTPRequest(method: "POST", path: "/mode", body: Array("soon".utf8)))
        #expect(String(decoding: inProcess.body, as: UTF8.self) == "no event loop")
        #expect(await router.respond(to: HTTPRequest(method: "POST", path: "/mode", body: Array("throw-now".utf8))).status == 409)
    }

    @Test("event loops run under SCHED_BATCH when batchScheduledLoops asks for it, and under the default policy otherwise",
          arguments: [true, false])
    func batchScheduledLoops(batch: Bool) async throws {
        var router = Router()
        // The policy of the thread that runs a blocking handler: the loop's own.
        router.on("GET", "/policy", onLoop: { _, _ in .now(.text("\(sched_getscheduler(0))")) })
        var configuration = serving(loops: 2)
        configuration.batchScheduledLoops = batch
        try await withServer(router, configuration: configuration) { _, port in
            // Several connections, so both loops answer (SO_REUSEPORT spreads connections over them).
            for _ in 0..<8 {
                let (status, _, body) = try await fetch(port, "/policy", headers: ["Connection": "close"])
                #expect(status == 200)
                #expect(body == String(batch ? EventLoop.batchPolicy : SCHED_OTHER), "policy \(body)")
            }
        }
    }

    @Test("one address may hold only connections_per_address connections, however many event loops share the port; the next is answered 503 too_many_connections after the wait for a slot, and closed; another address is served",
          arguments: [0, 2])
    func perAddressLimit(loops: Int) async throws {
        var configuration = serving(loops: loops, connectionsPerAddress: 2)
        configuration.addressSlotWait = .milliseconds(300)
        try await withServer(echoRouter(), configuration: configuration) { _, port in
            let held = try await offPool { try OpenConnections(port: port, count: 2) }
            #expect(held.bodies == ["hello nobody from 127.0.0.1", "hello nobody from 127.0.0.1"])
            let refusal = #"{"error":"too_many_connections","reason":"this address already holds 2 connections; reuse one or retry later"}"#
            let began = ContinuousClock.now
            let (status, response, body) = try await fetch(port, "/hello")
            #expect(status == 503)
            #expect(ContinuousClock.now - began >= .milliseconds(300))
            #expect(response.value(forHTTPHeaderField: "Retry-After") == "1")
            #expect(body == refusal)
            // With a body too: one answer, then the server closes.
            let refusedPost = try await offPool { () -> (Int, String, Bool)? in
                let socket = try RawHTTPConnection.open(port: port, timeoutMilliseconds: 10_000)
                try socket.send("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc")
                return socket.response().map { ($0.status, $0.body, socket.isClosedByServer()) }
            }
            #expect(refusedPost?.0 == 503 && refusedPost?.1 == refusal && refusedPost?.2 == true)
            // Another address has slots of its own.
            #expect(await offPool { request(from: "127.0.0.2", port: port) } == "200 hello nobody from 127.0.0.2")
            // One of the address's connections closes: the next one is served.
            held.sockets[0].shutdown()
            #expect(try await fetch(port, "/hello?name=next").2 == "hello next from 127.0.0.1")
        }
    }

    @Test("a connection stops counting as soon as its client closes it: the limit's worth, closed, is followed at once by as many new ones, all served",
          arguments: [0, 2])
    func closedConnectionsStopCounting(loops: Int) async throws {
        try await withServer(echoRouter(), configuration: serving(loops: loops, connectionsPerAddress: 8)) { _, port in
            let served = try await offPool { () -> [Int] in
                try (0..<10).map { _ in
                    let round = try OpenConnections(port: port, count: 8)
                    for socket in round.sockets { socket.shutdown() }
                    return round.bodies.filter { $0 == "hello nobody from 127.0.0.1" }.count
                }
            }
            #expect(served == Array(repeating: 8, count: 10))
        }
    }

    @Test("a connection over the limit waits for a slot: it is served as soon as one of its address's connections closes",
          arguments: [0, 2])
    func waitsForSlot(loops: Int) async throws {
        var configuration = serving(loops: loops, connectionsPerAddress: 2)
        configuration.addressSlotWait = .seconds(60)
        try await withServer(echoRouter(), configuration: configuration) { _, port in
            let (answeredEarly, body, waited) = try await offPool { () -> (Bool, String?, Duration) in
                let held = try OpenConnections(port: port, count: 2)
                let third = try RawHTTPConnection.open(port: port, timeoutMilliseconds: 10_000)
                try third.send("GET /hello?name=third HTTP/1.1\r\nHost: x\r\n\r\n")
                let answeredEarly = third.isReadable(within: 300)
                let closed = ContinuousClock.now
                held.sockets[1].shutdown()
                return (answeredEarly, third.response()?.body, ContinuousClock.now - closed)
            }
            #expect(!answeredEarly)
            #expect(body == "hello third from 127.0.0.1")
            #expect(waited < .seconds(5), "answered \(waited) after the close")
        }
    }

    @Test("stop answers a connection waiting for a slot once its wait ends, then stops", arguments: [0, 2])
    func stopWhileWaitingForSlot(loops: Int) async throws {
        var configuration = serving(loops: loops, connectionsPerAddress: 1)
        configuration.addressSlotWait = .seconds(2)
        let server = HTTPServer(router: echoRouter(), configuration: configuration)
        let port = try await server.start(port: 0)
        let held = try await offPool { try OpenConnections(port: port, count: 1) }
        #expect(held.bodies == ["hello nobody from 127.0.0.1"])
        async let answer = offPool { () -> (status: Int, body: String)? in
            guard let waiting = try? RawHTTPConnection.open(port: port, timeoutMilliseconds: 10_000),
                  (try? waiting.send("GET /hello HTTP/1.1\r\nHost: x\r\n\r\n")) != nil else { return nil }
            return waiting.response()
        }
        // Time for the server to read the request and suspend the connection, well within its wait.
        try await Task.sleep(for: .milliseconds(300))
        await server.stop()
        #expect(await answer?.status == 503)
        #expect(await answer?.body.contains("too_many_connections") == true)
    }

    @Test("64 clients of one address at a limit of 64, each with a new connection per request, are all answered",
          arguments: [0, 2])
    func poolWithConnectionPerRequest(loops: Int) async throws {
        try await withServer(echoRouter(), configuration: serving(loops: loops, connectionsPerAddress: 64)) { _, port in
            let answered = await onThreads(64) { client in
                (0..<20).filter { index in
                    // Each request on a connection of its own, closed by the client once answered (an HTTP/1.1 client
                    // without a pool, or a pool that does not keep connections).
                    guard let socket = try? RawHTTPConnection.open(port: port, timeoutMilliseconds: 10_000),
                          (try? socket.send("GET /hello?name=c\(client)-\(index) HTTP/1.1\r\nHost: x\r\n\r\n")) != nil else { return false }
                    return socket.response()?.body == "hello c\(client)-\(index) from 127.0.0.1"
                }.count
            }
            #expect(answered == Array(repeating: 20, count: 64))
        }
    }

    @Test("64 keep-alive clients of one address at a limit of 64 are all answered", arguments: [0, 2])
    func keepAlivePool(loops: Int) async throws {
        try await withServer(echoRouter(), configuration: serving(loops: loops, connectionsPerAddress: 64)) { _, port in
            let report = await LoadClient.run(port: port, concurrency: 64, total: 1_280, timeout: 10) { index in
                LoadRequest(path: "/hello?name=k\(index)")
            }
            #expect(report.failures == 0)
            #expect(report.statuses == [200: 1_280])
        }
    }

    @Test("a connection over the limit waits until one within it closes")
    func connectionLimit() async throws {
        var configuration = HTTPServerConfiguration()
        configuration.connectionLimit = 2
        try await withServer(echoRouter(), configuration: configuration) { _, port in
            let (answeredEarly, thirdBody) = try await offPool { () -> (Bool, String?) in
                let first = try RawHTTPConnection.open(port: port), second = try RawHTTPConnection.open(port: port)
                try first.send("GET /hello?name=1 HTTP/1.1\r\nHost: x\r\n\r\n")
                try second.send("GET /hello?name=2 HTTP/1.1\r\nHost: x\r\n\r\n")
                _ = first.response()
                _ = second.response()
                let third = try RawHTTPConnection.open(port: port)
                try third.send("GET /hello?name=3 HTTP/1.1\r\nHost: x\r\n\r\n")
                let answeredEarly = third.isReadable(within: 300)
                first.shutdown()
                return (answeredEarly, third.response()?.body)
            }
            #expect(!answeredEarly)
            #expect(thirdBody == "hello 3 from 127.0.0.1")
        }
    }

    @Test("stop lets an in-flight request finish, then refuses connections", arguments: [0, 2])
    func gracefulStop(loops: Int) async throws {
        let (started, signal) = AsyncStream<Void>.makeStream()
        var router = Router()
        router.get("/slow") { _ in
            signal.yield()
            try await Task.sleep(for: .milliseconds(300))
            return .text("done")
        }
        let server = HTTPServer(router: router, configuration: serving(loops: loops))
        let port = try await server.start(port: 0)
        async let slow = fetch(port, "/slow")
        for await _ in started { break }
        await server.stop()
        let (status, _, body) = try await slow
        #expect(status == 200 && body == "done")
        #expect(throws: (any Error).self) { try RawHTTPConnection.open(port: port) }
    }

    @Test("200 concurrent requests all answered", arguments: [0, 2])
    func concurrency(loops: Int) async throws {
        try await withServer(echoRouter(), configuration: serving(loops: loops)) { _, port in
            let bodies = try await withThrowingTaskGroup(of: String.self) { group in
                for index in 0..<200 {
                    group.addTask { try await fetch(port, "/hello?name=c\(index)").2 }
                }
                return try await group.reduce(into: Set<String>()) { $0.insert($1) }
            }
            #expect(bodies.count == 200)
        }
    }

    @Test("start twice and bad hosts are refused")
    func startErrors() async throws {
        let server = HTTPServer(router: Router())
        await #expect(throws: HTTPServerError.self) { try await server.start(host: "not-an-ip", port: 0) }
        try await server.start(port: 0)
        await #expect(throws: HTTPServerError.self) { try await server.start(port: 0) }
        await server.stop()
    }
}

@Suite("Request parsing")
struct RequestParsingTests {
    @Test("form decoding", arguments: [
        ("a=1&b=%20x+y", ["a": "1", "b": " x y"]),
        ("a", ["a": ""]),
        ("a=%E2%9C%93&&b=", ["a": "✓", "b": ""]),
        ("", [:]),
    ])
    func formDecoding(body: String, expected: [String: String]) throws {
        #expect(try HTTPRequest(method: "POST", path: "/", body: Array(body.utf8)).formValues() == expected)
    }

    @Test("malformed forms are refused", arguments: ["a=%2", "a=%zz", "=x", "a=1&a=2", "a=%FF"])
    func badForms(body: String) {
        #expect(throws: HTTPError.self) { try HTTPRequest(method: "POST", path: "/", body: Array(body.utf8)).formValues() }
    }

    @Test("headers compare names without case and keep order")
    func headers() {
        var headers: HTTPHeaders = ["Content-Type": "a", "X-One": "1"]
        headers.add("x-one", "2")
        #expect(headers["CONTENT-type"] == "a")
        #expect(headers.values("X-ONE") == ["1", "2"])
        headers.set("X-One", "3")
        #expect(headers.values("x-one") == ["3"])
        #expect(headers["missing"] == nil)
        #expect(HTTPRequest(method: "POST", path: "/", headers: ["content-type": "Application/JSON; charset=utf-8"]).mediaType == "application/json")
    }

    @Test("an error answer is {\"error\",\"reason\"} JSON")
    func errorBody() throws {
        let response = HTTPError.badRequest("missing \"user\"\n").response
        #expect(response.status == 400)
        #expect(String(decoding: response.body, as: UTF8.self) == #"{"error":"bad_request","reason":"missing \"user\"\n"}"#)
    }

    @Test("the router answers in-process, HEAD uses GET")
    func inProcess() async {
        let router = echoRouter()
        let response = await router.respond(to: HTTPRequest(method: "HEAD", path: "/hello", query: ["name": "x"]))
        #expect(response.status == 200)
        #expect(await router.respond(to: HTTPRequest(method: "GET", path: "/missing")).status == 404)
    }
}

@Suite("LoadClient")
struct LoadClientTests {
    @Test("sends every request over keep-alive connections and counts statuses")
    func load() async throws {
        try await withServer(echoRouter()) { _, port in
            let report = await LoadClient.run(port: port, concurrency: 8, total: 2_000) { index in
                index % 10 == 0 ? LoadRequest(path: "/nope") : LoadRequest(method: "POST", path: "/echo", body: Array("x\(index)".utf8))
            }
            print("load: \(Int(report.perSecond)) responses/s (debug build)")
            #expect(report.failures == 0)
            #expect(report.responses == 2_000)
            #expect(report.statuses == [201: 1_800, 404: 200])
        }
    }
}

/// A `GET /hello` whose head (request line, headers, empty line) is `size` bytes, padded by one header.
func paddedHead(_ size: Int) -> String {
    let prefix = "GET /hello HTTP/1.1\r\nHost: x\r\nX-Pad: "
    return prefix + String(repeating: "p", count: size - prefix.utf8.count - 4) + "\r\n\r\n"
}

/// Connections to `127.0.0.1:port` held open, each having sent one `GET /hello` and read its answer (nil when none).
struct OpenConnections: @unchecked Sendable {
    // Unchecked: a test hands them from the thread that opened them to the one that closes them, never both at once.
    let sockets: [RawHTTPConnection]
    let bodies: [String?]

    init(port: Int, count: Int) throws {
        sockets = try (0..<count).map { _ in try RawHTTPConnection.open(port: port, timeoutMilliseconds: 10_000) }
        bodies = sockets.map { socket in
            (try? socket.send("GET /hello HTTP/1.1\r\nHost: x\r\n\r\n")).flatMap { socket.response()?.body }
        }
    }
}

/// One `GET /hello` with `Connection: close` from `source` (a 127.x.x.x address) to `127.0.0.1:port`: the status and
/// body as `"200 hello…"`, nil when the server closed without an answer.
func request(from source: String, port: Int) -> String? {
    let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    defer { close(descriptor) }
    var timeout = timeval(tv_sec: 10, tv_usec: 0)
    setsockopt(descriptor, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
    var local = sockaddr_in(), remote = sockaddr_in()
    local.sin_family = sa_family_t(AF_INET)
    remote.sin_family = sa_family_t(AF_INET)
    remote.sin_port = UInt16(port).bigEndian
    guard inet_pton(AF_INET, source, &local.sin_addr) == 1, inet_pton(AF_INET, "127.0.0.1", &remote.sin_addr) == 1 else { return nil }
    func connected(_ call: (Int32, UnsafePointer<sockaddr>, socklen_t) -> Int32, _ address: sockaddr_in) -> Bool {
        withUnsafePointer(to: address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { call(descriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0 } }
    }
    guard connected(bind, local), connected(connect, remote) else { return nil }
    let bytes = Array("GET /hello HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".utf8)
    guard send(descriptor, bytes, bytes.count, Int32(MSG_NOSIGNAL)) == bytes.count else { return nil }
    var received: [UInt8] = [], chunk = [UInt8](repeating: 0, count: 4096)
    while case let count = recv(descriptor, &chunk, chunk.count, 0), count > 0 { received.append(contentsOf: chunk[0..<count]) }
    let text = String(decoding: received, as: UTF8.self)
    guard text.hasPrefix("HTTP/1.1 "), let bodyStart = text.range(of: "\r\n\r\n") else { return nil }
    return "\(text.dropFirst(9).prefix(3)) \(text[bodyStart.upperBound...])"
}

/// Runs `body` on `count` threads of its own at once (blocking clients stay off Swift's cooperative pool, and a
/// dispatch queue would not start them all together); the results in order.
func onThreads<T: Sendable>(_ count: Int, _ body: @escaping @Sendable (Int) -> T) async -> [T] {
    await withTaskGroup(of: (Int, T).self) { group in
        for index in 0..<count {
            group.addTask {
                await withCheckedContinuation { continuation in Thread { continuation.resume(returning: (index, body(index))) }.start() }
            }
        }
        return await group.reduce(into: [(Int, T)]()) { $0.append($1) }.sorted { $0.0 < $1.0 }.map(\.1)
    }
}

extension RawHTTPConnection {
    /// The next response as its status and text body; nil when the server closed or timed out instead.
    func response() -> (status: Int, body: String)? {
        guard case .response(let status, let body) = readResponse() else { return nil }
        return (status, String(decoding: body, as: UTF8.self))
    }
}
