import Foundation
import Synchronization
import BatonRawHTTP

/// The settings of one `baton-bench fuzz http` run.
struct HTTPFuzzSettings: Sendable {
    var address: LoopbackAddress
    var host: String
    var basePath: String
    var requests: Int
    var seed: UInt64
    var concurrency: Int
    var paths: [String]
    var probes: [String]
    var pid: Int32?
    var maxRSSGrowthKiB: Int
    var maxSeconds: Double
    /// Tokens the target accepts, for sign-in and link bodies.
    var tokens: [FuzzToken] = []
    /// The target's documented error codes: when set, every 4xx/5xx answer to well-formed HTTP must be
    /// `{"error","reason"}` with one of them (broken HTTP may get the HTTP library's own answers), a 500 is a
    /// failure whatever its code (against a direct database not even `inconsistent_database_answer` is owed), and
    /// so is 501 `not_configured` (the run's configuration has everything).
    var errorCodes: Set<String>? = nil
}

/// What a run saw; `failures` holds the first few problems in words.
struct HTTPFuzzReport: Sendable {
    var sent = 0
    var byKind: [String: Int] = [:]
    var statuses: [String: Int] = [:]
    /// `error` codes (`error/reason` for `invalid_token`) of the answers, when the run checks them.
    var errors: [String: Int] = [:]
    var closedWithoutAnswer = 0
    var timedOut = 0
    var failureCount = 0
    var failures: [String] = []
    var rssStartKiB: Int?
    var rssPeakKiB: Int?
    var rssEndKiB: Int?
    var seconds = 0.0

    mutating func fail(_ message: String) {
        failureCount += 1
        if failures.count < 10 { failures.append(message) }
    }
}

/// Runs the fuzzer: baseline probes, the requests on `concurrency` threads (each checking the answers it
/// is owed and, every 500 requests, a probe), then the probes again on fresh and kept-alive connections.
func runHTTPFuzz(_ settings: HTTPFuzzSettings, progress: @escaping @Sendable (String) -> Void) -> HTTPFuzzReport {
    let exchange = RawExchange(address: settings.address)
    let generator = FuzzCaseGenerator(paths: settings.paths.map { settings.basePath + $0 }, host: settings.host, tokens: settings.tokens)
    let report = Mutex(HTTPFuzzReport())
    let start = DispatchTime.now().uptimeNanoseconds

    // Baseline: what every probe answers before the storm.
    let probeRequests = settings.probes.map { path in
        Array("GET \(settings.basePath + path) HTTP/1.1\r\nHost: \(settings.host)\r\nUser-Agent: baton-fuzz\r\n\r\n".utf8)
    }
    var recorded: [RawHTTPConnection.Outcome] = []
    for (index, request) in probeRequests.enumerated() {
        let outcome = exchange.exchange([RawExchange.Piece(bytes: request)], timeoutMilliseconds: 5_000)[0]
        guard case .response = outcome else {
            var failed = HTTPFuzzReport()
            failed.fail("probe GET \(settings.probes[index]) got no answer before fuzzing (\(outcome.summary))")
            return failed
        }
        recorded.append(outcome)
    }
    let baseline = recorded
    @Sendable func checkProbe(_ index: Int, _ outcome: RawHTTPConnection.Outcome, when: String) -> String? {
        outcome == baseline[index] ? nil : "probe GET \(settings.probes[index]) \(when): \(outcome.summary), expected \(baseline[index].summary)"
    }
    report.withLock { $0.rssStartKiB = settings.pid.flatMap(residentKiB) }

    let next = Atomic<Int>(0)
    let deadline = start + UInt64(settings.maxSeconds * 1e9)
    let group = DispatchGroup()
    for _ in 0..<settings.concurrency {
        group.enter()
        let thread = Thread {
            defer { group.leave() }
            while true {
                let index = next.wrappingAdd(1, ordering: .relaxed).oldValue
                guard index < settings.requests, DispatchTime.now().uptimeNanoseconds < deadline else { return }
                let fuzzCase = generator.make(index: index, seed: settings.seed)
                var outcomes = exchange.exchange(fuzzCase.pieces, responses: fuzzCase.expectation.responses, timeoutMilliseconds: fuzzCase.timeoutMilliseconds)
                if let followUp = fuzzCase.followUp, case .response(200..<300, let body) = outcomes.first {
                    outcomes += exchange.exchange([RawExchange.Piece(bytes: followUp(body))], timeoutMilliseconds: fuzzCase.timeoutMilliseconds)
                }
                var probeFailure: String?
                if index % 500 == 499, !probeRequests.isEmpty {
                    let probe = index / 500 % probeRequests.count
                    let outcome = exchange.exchange([RawExchange.Piece(bytes: probeRequests[probe])], timeoutMilliseconds: 5_000)[0]
                    probeFailure = checkProbe(probe, outcome, when: "after request \(index)")
                }
                let rss = index % 1_000 == 999 ? settings.pid.flatMap(residentKiB) : nil
                report.withLock { report in
                    report.sent += 1
                    report.byKind[fuzzCase.kind.rawValue, default: 0] += 1
                    record(outcomes, of: fuzzCase, index: index, seed: settings.seed, errorCodes: settings.errorCodes, into: &report)
                    if let probeFailure { report.fail(probeFailure) }
                    if let rss { report.rssPeakKiB = max(report.rssPeakKiB ?? 0, rss) }
                    if report.sent % 10_000 == 0 { progress("sent \(report.sent) requests, \(report.failureCount) failures") }
                }
            }
        }
        thread.stackSize = 1 << 20
        thread.start()
    }
    group.wait()

    // Afterwards: every probe, each on a fresh connection, then all of them again on one kept-alive connection.
    var final = report.withLock { $0 }
    for (index, request) in probeRequests.enumerated() {
        let outcome = exchange.exchange([RawExchange.Piece(bytes: request)], timeoutMilliseconds: 5_000)[0]
        if let failure = checkProbe(index, outcome, when: "after fuzzing") { final.fail(failure) }
    }
    if !probeRequests.isEmpty {
        let outcomes = exchange.exchange([RawExchange.Piece(bytes: Array(probeRequests.joined()))], responses: probeRequests.count, timeoutMilliseconds: 5_000)
        for index in probeRequests.indices {
            let outcome = index < outcomes.count ? outcomes[index] : .closed
            if let failure = checkProbe(index, outcome, when: "after fuzzing, kept alive") { final.fail(failure) }
        }
    }
    if let pid = settings.pid {
        guard let end = residentKiB(pid) else {
            final.fail("process \(pid) is gone")
            return final
        }
        final.rssEndKiB = end
        final.rssPeakKiB = max(final.rssPeakKiB ?? 0, end)
        if let begin = final.rssStartKiB, end - begin > settings.maxRSSGrowthKiB {
            final.fail("resident memory grew from \(begin) KiB to \(end) KiB, more than \(settings.maxRSSGrowthKiB) KiB")
        }
    }
    final.seconds = Double(DispatchTime.now().uptimeNanoseconds - start) / 1e9
    return final
}

/// Counts one exchange and checks it against what the server owed.
private func record(_ outcomes: [RawHTTPConnection.Outcome], of fuzzCase: FuzzCase, index: Int, seed: UInt64, errorCodes: Set<String>?,
                    into report: inout HTTPFuzzReport) {
    for outcome in outcomes {
        switch outcome {
        case .response(let status, let body):
            report.statuses["\(status)", default: 0] += 1
            let (code, reason) = errorCodes == nil ? (nil, nil) : error(of: body)
            if let code { report.errors[code == "invalid_token" ? "\(code)/\(reason ?? "")" : code, default: 0] += 1 }
            let protocolAnswer = status == 505 || (status == 501 && code != "not_configured")
            if status >= 500, !(protocolAnswer && !fuzzCase.expectation.isStrict) {
                report.fail("request \(index) (\(fuzzCase.kind.rawValue), seed \(seed)) got \(status) \(code ?? "")")
            } else if let errorCodes, status >= 400, fuzzCase.expectation.isStrict, !(code.map(errorCodes.contains) ?? false) {
                report.fail("request \(index) (\(fuzzCase.kind.rawValue), seed \(seed)) got \(status) without a documented {\"error\",\"reason\"}: \(String(decoding: body.prefix(200), as: UTF8.self))")
            }
        case .closed: report.closedWithoutAnswer += 1
        case .timedOut: report.timedOut += 1
        case .connectFailed(let code):
            report.fail("request \(index): cannot connect (\(String(cString: strerror(code))))")
        }
    }
    if case .answers(let count) = fuzzCase.expectation {
        let answered = outcomes.filter { if case .response = $0 { true } else { false } }.count
        // Fewer answers are owed only when the last one announced `Connection: close` (the exchange stops there).
        let stoppedByClose = answered == outcomes.count && answered > 0
        if answered < count && !stoppedByClose {
            report.fail("request \(index) (\(fuzzCase.kind.rawValue), seed \(seed)): well-formed, \(answered) of \(count) answers (\(outcomes.last?.summary ?? "none"))")
        }
    }
}

/// The `error` and `reason` of a `{"error","reason"}` body (both strings), or nils for any other body.
private func error(of body: [UInt8]) -> (code: String?, reason: String?) {
    guard let object = try? JSONSerialization.jsonObject(with: Data(body)) as? [String: Any],
          let code = object["error"] as? String, let reason = object["reason"] as? String else { return (nil, nil) }
    return (code, reason)
}

/// The resident set size of process `pid` in KiB (`VmRSS` of /proc/PID/status), or nil when it is gone.
func residentKiB(_ pid: Int32) -> Int? {
    guard let status = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8) else { return nil }
    for line in status.split(separator: "\n") where line.hasPrefix("VmRSS:") {
        return Int(line.dropFirst(6).trimmingCharacters(in: .whitespaces).split(separator: " ").first ?? "")
    }
    return nil
}

extension FuzzCase.Expectation {
    var responses: Int {
        switch self {
        case .answers(let count): count
        case .anything: 1
        }
    }

    var isStrict: Bool {
        if case .answers = self { true } else { false }
    }
}

extension RawHTTPConnection.Outcome {
    /// A short description without the body.
    var summary: String {
        switch self {
        case .response(let status, let body): "status \(status), \(body.count)-byte body"
        case .closed: "closed without an answer"
        case .timedOut: "no answer in time"
        case .connectFailed(let code): "cannot connect (\(String(cString: strerror(code))))"
        }
    }
}
