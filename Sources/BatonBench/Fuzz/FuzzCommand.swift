import Foundation
import BatonCommandLine
import BatonJSON
import BatonRawHTTP

/// `baton-bench fuzz http`: random and mutated raw HTTP requests against a server on loopback, then checks
/// that it is still up, answers its probes as before, and kept its memory bounded.
package let fuzzCommand = Command(
    name: "fuzz",
    summary: "fuzz a Baton or emulator HTTP server on loopback (fuzz http)",
    subcommands: [Command(
        name: "http",
        summary: "random and mutated raw HTTP requests against a server on loopback",
        abstract: """
        Sends N random and mutated requests over raw TCP to URL, which must be on loopback
        (127.x.x.x, localhost or [::1]): well-formed requests, random and mutated JSON bodies, broken request
        lines, huge headers, bad chunking, slow and stalled bodies, pipelined requests and random bytes.
        Each request is built from the seed and its number alone, so a failure names what to replay.
        """,
        options: FuzzHTTPOptions.self,
        discussion: """
        Fails (exit 1) when the server refuses connections, answers a well-formed request with 5xx or not at
        all, answers a probe differently, or grows past the memory bound. The last line is one JSON object.
        """,
        run: runFuzzHTTP
    )]
)

/// The options of `baton-bench fuzz http`.
private struct FuzzHTTPOptions: CommandOptions {
    let url = Option.text("url", "URL", "the server's base URL (its path prefixes every request path)").required()
    let requests = Option.integer("requests", default: 100_000, in: 1...10_000_000, "number of requests")
    let seed = Option.text("seed", "S", default: "1", "seed of the random requests")
    let concurrency = Option.integer("concurrency", "C", default: 8, in: 1...256, "connections in flight")
    let paths = Option.text("paths", "P,P…", "paths to aim at (default the emulator's Apple and device endpoints)")
    let probe = Option.repeatable("probe", "PATH", "a GET whose answer (status and body) must not change; repeatable\n(default /auth/keys)")
    let pid = Option.text("pid", "PID", "the server's process: its resident memory is sampled from /proc and its\ngrowth over the run must stay under --max-rss-growth-mb")
    let maxRSSGrowthMB = Option.integer("max-rss-growth-mb", "M", default: 64, in: 1...65_536, "the bound on the server's memory growth, in MiB")
    let seconds = Option.number("seconds", "T", default: 900, in: 1...86_400, "stop sending after T seconds")
    let tokens = Option.text("tokens", "FILE", "identity tokens the server accepts, one `ID_TOKEN NONCE` a line (NONCE: the raw\nnonce, whose SHA-256 hex or itself is the claim), for sign-in and link bodies")
    let errorCodes = Option.text("error-codes", "C,C…", "the server's documented error codes: every 4xx/5xx answer to well-formed\nHTTP must be {\"error\",\"reason\"} with one of them, and no 5xx but protocol answers (505, 501 other\nthan not_configured) is owed")
}

@Sendable
private func runFuzzHTTP(_ parsed: Parsed<FuzzHTTPOptions>) async throws -> Int32 {
    let urlText = parsed.url
    guard let url = URL(string: urlText), let address = LoopbackAddress(url: url) else {
        throw CommandFailure.usage("--url must be http://HOST:PORT on loopback (127.x.x.x, localhost or [::1])")
    }
    guard let seed = UInt64(parsed.seed) else { throw CommandFailure.usage("--seed must be a whole number") }
    let pid: Int32?
    if let text = parsed.pid {
        guard let number = Int32(text), number > 0 else { throw CommandFailure.usage("--pid must be a process ID") }
        guard residentKiB(number) != nil else { throw CommandFailure.usage("--pid \(number): no such process") }
        pid = number
    } else {
        pid = nil
    }
    let defaultPaths = ["/auth/keys", "/auth/token", "/auth/usermigrationinfo", "/emulator/authorize", "/emulator/credential-state"]
    let paths = parsed.paths.map { $0.split(separator: ",").map(String.init) } ?? defaultPaths
    guard paths.allSatisfy({ $0.hasPrefix("/") }), !paths.isEmpty else { throw CommandFailure.usage("--paths must be paths starting with '/'") }
    let probes = parsed.probe.isEmpty ? ["/auth/keys"] : parsed.probe
    guard probes.allSatisfy({ $0.hasPrefix("/") }) else { throw CommandFailure.usage("--probe must be a path starting with '/'") }
    var tokens: [FuzzToken] = []
    if let file = parsed.tokens {
        guard let text = try? String(contentsOfFile: file, encoding: .utf8) else { throw CommandFailure.usage("--tokens \(file): cannot read it") }
        for line in text.split(separator: "\n") {
            let fields = line.split(separator: " ")
            guard fields.count == 2 else { throw CommandFailure.usage("--tokens \(file): each line must be `ID_TOKEN NONCE`") }
            tokens.append(FuzzToken(idToken: String(fields[0]), nonce: String(fields[1])))
        }
    }
    let errorCodes = parsed.errorCodes.map { Set($0.split(separator: ",").map(String.init)) }
    let basePath = url.path.hasSuffix("/") ? String(url.path.dropLast()) : url.path
    let settings = HTTPFuzzSettings(
        address: address, host: "\(url.host ?? "localhost"):\(url.port ?? 80)", basePath: basePath,
        requests: parsed.requests, seed: seed,
        concurrency: parsed.concurrency, paths: paths, probes: probes, pid: pid,
        maxRSSGrowthKiB: parsed.maxRSSGrowthMB * 1024,
        maxSeconds: parsed.seconds, tokens: tokens, errorCodes: errorCodes
    )

    print("fuzzing \(url.absoluteString): \(settings.requests) requests, seed \(seed), \(settings.concurrency) connections")
    let report = await withCheckedContinuation { (continuation: CheckedContinuation<HTTPFuzzReport, Never>) in
        // Blocking sockets and sleeps: on threads of the fuzzer's own, never on the cooperative pool.
        Thread.detachNewThread {
            continuation.resume(returning: runHTTPFuzz(settings) { print($0) })
        }
    }
    for failure in report.failures { print("FAILURE: \(failure)") }
    let kinds = report.byKind.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }.joined(separator: ", ")
    print("sent \(report.sent) requests in \(String(format: "%.1f", report.seconds)) s (\(kinds))")
    print("statuses \(report.statuses.sorted { $0.key < $1.key }.map { "\($0.key)×\($0.value)" }.joined(separator: " ")), closed without answer \(report.closedWithoutAnswer), no answer in time \(report.timedOut)")
    if let start = report.rssStartKiB, let peak = report.rssPeakKiB, let end = report.rssEndKiB {
        print("server resident memory: \(start) KiB before, \(peak) KiB peak, \(end) KiB after")
    }
    var statuses = JSONObject()
    for (status, count) in report.statuses.sorted(by: { $0.key < $1.key }) { statuses[status] = .number(Double(count)) }
    var figures: JSONObject = [
        "requests": .number(Double(report.sent)),
        "seed": .string(String(seed)),
        "seconds": .number((report.seconds * 10).rounded() / 10),
        "failures": .number(Double(report.failureCount)),
        "closed_without_answer": .number(Double(report.closedWithoutAnswer)),
        "timed_out": .number(Double(report.timedOut)),
        "statuses": .object(statuses),
    ]
    if !report.errors.isEmpty {
        var errors = JSONObject()
        for (code, count) in report.errors.sorted(by: { $0.key < $1.key }) { errors[code] = .number(Double(count)) }
        figures["errors"] = .object(errors)
    }
    if let start = report.rssStartKiB, let peak = report.rssPeakKiB, let end = report.rssEndKiB {
        figures["rss_kib_before"] = .number(Double(start))
        figures["rss_kib_peak"] = .number(Double(peak))
        figures["rss_kib_after"] = .number(Double(end))
    }
    print(JSON.serialize(.object(figures)))
    if report.failureCount > 0 {
        throw CommandFailure.rejected("baton-bench fuzz http: \(report.failureCount) failures (first: \(report.failures.first ?? "?"))")
    }
    return 0
}
