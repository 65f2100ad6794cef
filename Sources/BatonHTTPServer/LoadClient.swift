import Foundation

/// One request a ``LoadClient`` sends.
public struct LoadRequest: Sendable {
    /// The method, e.g. `POST`.
    public var method: String
    /// Path and query, e.g. `/auth/keys`.
    public var path: String
    /// Extra headers (`Host` and `Content-Length` are added).
    public var headers: [(String, String)]
    /// The body bytes.
    public var body: [UInt8]

    /// Creates a request.
    public init(method: String = "GET", path: String, headers: [(String, String)] = [], body: [UInt8] = []) {
        self.method = method
        self.path = path
        self.headers = headers
        self.body = body
    }

    /// The request as bytes on the wire.
    func serialized(host: String) -> [UInt8] {
        var head = "\(method) \(path) HTTP/1.1\r\nHost: \(host)\r\nContent-Length: \(body.count)\r\n"
        for (name, value) in headers { head += "\(name): \(value)\r\n" }
        head += "\r\n"
        return Array(head.utf8) + body
    }
}

/// What a load run measured.
public struct LoadReport: Sendable {
    /// Responses received.
    public var responses: Int
    /// Requests that got no response (connection errors, malformed answers).
    public var failures: Int
    /// Wall-clock duration of the run in seconds.
    public var seconds: Double
    /// Responses by status code.
    public var statuses: [Int: Int]
    /// Responses per second.
    public var perSecond: Double { seconds > 0 ? Double(responses) / seconds : 0 }
}

/// A load generator for benchmarks only: HTTP/1.1 keep-alive connections over POSIX sockets,
/// one blocking thread per connection (never Swift's cooperative pool).
///
/// It understands just what ``HTTPServer`` answers (a `Content-Length` body); it is not a
/// general HTTP client and must never be used to talk to Apple.
public enum LoadClient {
    /// Sends `total` requests over `concurrency` keep-alive connections to `host:port`
    /// (an IPv4 address) and reports what came back. `request(i)` builds the i-th request; a
    /// response slower than `timeout` seconds counts as a failure (default 60).
    public static func run(
        host: String = "127.0.0.1",
        port: Int,
        concurrency: Int,
        total: Int,
        timeout: Int = 60,
        request: @escaping @Sendable (Int) -> LoadRequest
    ) async -> LoadReport {
        let start = ContinuousClock.now
        let results = await withCheckedContinuation { (continuation: CheckedContinuation<[WorkerResult], Never>) in
            let collector = ResultCollector(expected: concurrency) { continuation.resume(returning: $0) }
            for worker in 0..<concurrency {
                let thread = Thread {
                    var result = WorkerResult()
                    var connection: LoadConnection?
                    var index = worker
                    while index < total {
                        if connection == nil { connection = LoadConnection(host: host, port: port, timeout: timeout) }
                        guard let open = connection else { result.failures += 1; index += concurrency; continue }
                        switch open.exchange(request(index).serialized(host: host)) {
                        case .answered(let status, let keepAlive):
                            result.statuses[status, default: 0] += 1
                            if !keepAlive { connection = nil }
                        case .failed:
                            result.failures += 1
                            connection = nil
                        }
                        index += concurrency
                    }
                    collector.add(result)
                }
                thread.stackSize = 256 * 1024
                thread.start()
            }
        }
        let elapsed = ContinuousClock.now - start
        var report = LoadReport(responses: 0, failures: 0, seconds: Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18, statuses: [:])
        for result in results {
            report.failures += result.failures
            for (status, count) in result.statuses {
                report.statuses[status, default: 0] += count
                report.responses += count
            }
        }
        return report
    }
}

private struct WorkerResult: Sendable {
    var statuses: [Int: Int] = [:]
    var failures = 0
}

/// Gathers the workers' results and calls `done` once all have reported.
private final class ResultCollector: @unchecked Sendable {
    // `results` is guarded by `lock`; `done` is called once, by the last worker.
    private let lock = NSLock()
    private var results: [WorkerResult] = []
    private let expected: Int
    private let done: ([WorkerResult]) -> Void

    init(expected: Int, done: @escaping ([WorkerResult]) -> Void) {
        self.expected = expected
        self.done = done
    }

    func add(_ result: WorkerResult) {
        let finished: [WorkerResult]? = lock.withLock {
            results.append(result)
            return results.count == expected ? results : nil
        }
        if let finished { done(finished) }
    }
}

/// One blocking keep-alive connection; owns its socket.
private final class LoadConnection {
    enum Outcome { case answered(status: Int, keepAlive: Bool), failed }

    private let fd: Int32
    private var buffer: [UInt8] = []

    init?(host: String, port: Int, timeout: Int) {
        fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { return nil }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = UInt16(clamping: port).bigEndian
        guard inet_pton(AF_INET, host, &address.sin_addr) == 1 else { close(fd); return nil }
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard connected == 0 else { close(fd); return nil }
        var one: Int32 = 1
        setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
        var limit = timeval(tv_sec: timeout, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, socklen_t(MemoryLayout<timeval>.size))
    }

    deinit { close(fd) }

    /// Writes one request and reads one `Content-Length` response.
    func exchange(_ request: [UInt8]) -> Outcome {
        var sent = 0
        while sent < request.count {
            let n = request[sent...].withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            guard n > 0 else { return .failed }
            sent += n
        }
        let terminator: [UInt8] = [13, 10, 13, 10]
        var headEnd: Int?
        while true {
            if let range = buffer.firstRange(of: terminator) { headEnd = range.upperBound; break }
            guard fill() else { return .failed }
        }
        guard let headEnd else { return .failed }
        let head = String(decoding: buffer[..<headEnd], as: UTF8.self).lowercased()
        let lines = head.split(separator: "\r\n")
        guard let statusLine = lines.first, statusLine.hasPrefix("http/1.1 "),
              let status = Int(statusLine.dropFirst(9).prefix(3)) else { return .failed }
        var length = 0
        var keepAlive = true
        for line in lines.dropFirst() {
            if line.hasPrefix("content-length:") { length = Int(line.dropFirst(15).trimmingCharacters(in: .whitespaces)) ?? -1 }
            if line.hasPrefix("connection:") && line.contains("close") { keepAlive = false }
            if line.hasPrefix("transfer-encoding:") { return .failed }
        }
        guard length >= 0 else { return .failed }
        while buffer.count < headEnd + length {
            guard fill() else { return .failed }
        }
        buffer.removeFirst(headEnd + length)
        return .answered(status: status, keepAlive: keepAlive)
    }

    private func fill() -> Bool {
        var chunk = [UInt8](repeating: 0, count: 16 * 1024)
        let n = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
        guard n > 0 else { return false }
        buffer.append(contentsOf: chunk[..<n])
        return true
    }
}
