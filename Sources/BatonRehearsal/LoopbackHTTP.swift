import BatonAppleSignIn
import BatonConcurrency
import BatonEmulator
import BatonHTTPServer
import BatonRawHTTP
import Foundation
import Synchronization

/// Keep-alive HTTP/1.1 to one loopback server, for the rehearsal's devices' requests to Baton's service:
/// `connections` threads of its own, each with one ``RawHTTPConnection``, take the requests in turn. Threads of
/// its own, not Dispatch's: the service needs Dispatch's threads to answer, and blocked readers there would
/// starve it. A million-user rehearsal sends some 350,000 requests, and URLSession's per-request work (curl
/// handles, timers, queue hops) was most of the client's CPU. ``close()`` ends the threads.
final class LoopbackHTTP: Sendable {
    /// The request went out but no complete response came back.
    struct Failure: Error, CustomStringConvertible {
        var description: String
    }

    private struct Job: Sendable {
        var path: String
        var bytes: [UInt8]
        var continuation: CheckedContinuation<Result<(status: Int, body: [UInt8]), Failure>, Never>
    }

    private let address: LoopbackAddress
    private let authority: String
    private let timeoutMilliseconds: Int
    private let queue = Mutex<(jobs: [Job], head: Int, closed: Bool)>(([], 0, false))
    private let ready = DispatchSemaphore(value: 0)
    private let connections: Int

    /// A client of `url` (`http://127.0.0.1:PORT`) with `connections` threads and connections; nil for anything
    /// but a numeric loopback address.
    init?(url: URL, connections: Int, timeoutSeconds: Int = 30) {
        guard let address = LoopbackAddress(url: url), let host = url.host, let port = url.port else { return nil }
        self.address = address
        authority = host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)"
        timeoutMilliseconds = timeoutSeconds * 1000
        self.connections = max(1, connections)
        for _ in 0..<self.connections {
            let thread = Thread { [self] in serve() }
            thread.name = "baton.rehearse.http"
            thread.start()
        }
    }

    /// Sends one request and returns the status and body. A kept-alive connection the server closed meanwhile
    /// is replaced once.
    /// - Throws: ``Failure``.
    func send(_ method: String, _ path: String, headers: [(String, String)] = [], body: [UInt8] = []) async throws -> (status: Int, body: [UInt8]) {
        var head = "\(method) \(path) HTTP/1.1\r\nHost: \(authority)\r\nContent-Length: \(body.count)\r\n"
        for (name, value) in headers { head += "\(name): \(value)\r\n" }
        let bytes = Array((head + "\r\n").utf8) + body
        let result = await withCheckedContinuation { continuation in
            let accepted = queue.withLock { state in
                guard !state.closed else { return false }
                state.jobs.append(Job(path: path, bytes: bytes, continuation: continuation))
                return true
            }
            if accepted { ready.signal() } else { continuation.resume(returning: .failure(Failure(description: "closed"))) }
        }
        return try result.get()
    }

    /// Ends the threads once the requests already sent are answered.
    func close() {
        queue.withLock { $0.closed = true }
        for _ in 0..<connections { ready.signal() }
    }

    /// One thread: takes the next request, sends it on its connection, resumes the caller.
    private func serve() {
        var connection: RawHTTPConnection?
        while true {
            ready.wait()
            let next = queue.withLock { state -> Job? in
                guard state.head < state.jobs.count else { return nil }
                let job = state.jobs[state.head]
                state.head += 1
                if state.head > 4_096 {
                    state.jobs.removeFirst(state.head)
                    state.head = 0
                }
                return job
            }
            guard let job = next else { break }
            var answer: Result<(status: Int, body: [UInt8]), Failure> = .failure(Failure(description: "no response from \(authority)\(job.path)"))
            for _ in 0..<2 {
                let reused = connection != nil
                if connection == nil {
                    switch RawHTTPConnection.open(address, timeoutMilliseconds: timeoutMilliseconds) {
                    case .success(let opened): connection = opened
                    case .failure(let error): answer = .failure(Failure(description: "cannot connect: errno \(error.code)"))
                    }
                }
                guard let open = connection else { break }
                if open.write(job.bytes), case .response(let status, let body) = open.readResponse() {
                    answer = .success((status, body))
                    if open.announcedClose { connection = nil }
                    break
                }
                open.shutdown()
                connection = nil
                if !reused { break }
            }
            job.continuation.resume(returning: answer)
        }
        connection?.shutdown()
    }
}

/// ``AppleClient``'s transport for the rehearsal's jobs: each request is answered by the in-process emulator's
/// routes (``AppleEmulator/respond(to:)``) without a socket. The client builds, signs and sends its requests and
/// reads the answers exactly as over HTTP (form body, client secret, bearer token, Apple's JSON and error
/// answers); what is left out is the emulator's HTTP server and the loopback connection, Apple's side of the wire,
/// whose thread hand-offs and TCP stack were a large share of `transfer-ids` and `exchange` CPU.
struct InProcessAppleTransport: AppleTransport {
    let emulator: AppleEmulator

    func send(_ request: AppleHTTPRequest) async throws -> AppleHTTPResponse {
        // Apple's endpoints take form bodies: a URL without a query (every one of the jobs') is not parsed again.
        var query: [String: String] = [:]
        if request.url.query != nil {
            for item in URLComponents(url: request.url, resolvingAgainstBaseURL: false)?.queryItems ?? [] { query[item.name] = item.value ?? "" }
        }
        let answer = await emulator.respond(to: HTTPRequest(method: "POST", path: request.url.path, query: query,
                                                            headers: HTTPHeaders(request.headers.map { ($0.key, $0.value) }),
                                                            body: Array(request.body), remoteAddress: "127.0.0.1"))
        var headers: [String: String] = [:]
        for field in answer.headers.fields { headers[field.name] = field.value }
        return AppleHTTPResponse(status: answer.status, headers: headers, body: Data(answer.body))
    }
}
