import Foundation
import BatonRawHTTP

/// One request a ``LoadClient`` sends.
package struct LoadRequest: Sendable {
    /// The method, e.g. `POST`.
    package var method: String
    /// Path and query, e.g. `/auth/keys`.
    package var path: String
    /// Extra headers (`Host` and `Content-Length` are added).
    package var headers: [(String, String)]
    /// The body bytes.
    package var body: [UInt8]

    /// Creates a request.
    package init(method: String = "GET", path: String, headers: [(String, String)] = [], body: [UInt8] = []) {
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
package struct LoadReport: Sendable {
    /// Responses received.
    package var responses: Int
    /// Requests that got no response (connection errors, malformed answers).
    package var failures: Int
    /// Wall-clock duration of the run in seconds.
    package var seconds: Double
    /// Responses by status code.
    package var statuses: [Int: Int]
    /// Responses per second.
    package var perSecond: Double { seconds > 0 ? Double(responses) / seconds : 0 }
}

/// A load generator for benchmarks only: HTTP/1.1 keep-alive ``RawHTTPConnection``s to loopback,
/// one blocking thread per connection (never Swift's cooperative pool).
package enum LoadClient {
    /// Sends `total` requests over `concurrency` keep-alive connections to `127.0.0.1:port`
    /// and reports what came back. `request(i)` builds the i-th request; a
    /// response slower than `timeout` seconds counts as a failure (default 60).
    package static func run(
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
                    var connection: RawHTTPConnection?
                    var index = worker
                    while index < total {
                        if connection == nil { connection = try? RawHTTPConnection.open(port: port, timeoutMilliseconds: timeout * 1000) }
                        guard let open = connection else { result.failures += 1; index += concurrency; continue }
                        open.write(request(index).serialized(host: "127.0.0.1"))
                        if case .response(let status, _) = open.readResponse() {
                            result.statuses[status, default: 0] += 1
                            if open.announcedClose { connection = nil }
                        } else {
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
