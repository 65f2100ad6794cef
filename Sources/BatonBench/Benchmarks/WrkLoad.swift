import BatonCommandLine
import BatonProcess
import Foundation

/// What one wrk run measured.
struct WrkFigures: Sendable {
    /// Keep-alive connections.
    var connections: Int
    /// Requests completed per second.
    var perSecond: Double
    /// Latency percentiles and maximum, in milliseconds.
    var p50: Double, p99: Double, max: Double
    /// Requests completed.
    var requests: Int
    /// Socket errors plus non-2xx answers (must be 0).
    var errors: Int
    /// wrk's own CPU time per request, in microseconds, over the middle of the run: on a machine the load generator
    /// shares with the server, what it spends is taken from the server.
    var clientCPUMicroseconds: Double
    /// PostgreSQL's CPU time (every `postgres` process of the machine) per request, in microseconds, over the same window.
    var databaseCPUMicroseconds: Double
    /// The server's CPU time (user and system) per request, in microseconds; filled in by the caller.
    var serverCPUMicroseconds = 0.0
}

/// Drives `wrk` (Debian's package, installed by `scripts/install-deps.sh`) against a running service: `POST path`
/// with the JSON bodies of `bodiesFile` (one a line), round-robin per wrk thread, for `seconds` at each connection
/// count. A Lua script builds every request once, before the run (formatting each in `request()` cost wrk about
/// 3 µs of its 23 µs of CPU per request, taken from the two cores the server has), and prints wrk's own figures as
/// one line (`wrk-figures …`) from its `done` hook, so nothing is read from wrk's human output.
///
/// With `eachOnce`, wrk's threads take disjoint bodies in file order (thread t of T sends bodies t, t + T, …), so
/// no body is sent twice while the file lasts: a token that migrates a user migrates it under wrk's load.
struct WrkLoad {
    let port: Int
    let path: String
    let bodiesFile: String
    let seconds: Int
    var eachOnce = false

    /// The Lua script: requests built from the file's bodies, sent round-robin from a per-thread offset, and the
    /// figures at the end.
    static let script = """
        local requests = {}
        local index = 0
        wrk.method = "POST"
        wrk.headers["Content-Type"] = "application/json"
        local stride = 1
        function init(args)
            for line in io.lines(args[1]) do requests[#requests + 1] = wrk.format(nil, nil, nil, line) end
            if args[3] == "once" then
                -- Disjoint bodies: thread t of T sends t, t + T, t + 2T, ...
                index, stride = offset or 0, tonumber(args[4])
            else
                -- Threads start at different places so two threads do not send the same token at once.
                index = ((tonumber(args[2]) or 0) + (offset or 0) * 7919) % #requests
            end
        end
        local thread_number = 0
        function setup(thread)
            thread:set("offset", thread_number)
            thread_number = thread_number + 1
        end
        function request()
            local next = requests[index % #requests + 1]
            index = index + stride
            return next
        end
        function done(summary, latency, requests)
            local e = summary.errors
            io.write(string.format("wrk-figures requests=%d duration_us=%d p50_us=%d p99_us=%d max_us=%d errors=%d\\n",
                summary.requests, summary.duration, latency:percentile(50), latency:percentile(99), latency.max,
                e.connect + e.read + e.write + e.status + e.timeout))
        end
        """

    /// Runs wrk once with `connections` connections (and as many threads as cores, at most one per connection).
    func run(connections: Int) throws -> WrkFigures {
        let directory = FileManager.default.temporaryDirectory
        let scriptPath = directory.appendingPathComponent("baton-wrk-\(UUID().uuidString).lua").path
        try WrkLoad.script.write(toFile: scriptPath, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(atPath: scriptPath) }
        let threads = max(1, min(connections, ProcessInfo.processInfo.activeProcessorCount))
        let offset = Int.random(in: 0..<1_000_000)  // each run starts elsewhere in the bodies
        let child = try ChildProcess("/usr/bin/env", ["wrk", "-t", String(threads), "-c", String(connections), "-d", "\(seconds)s",
                                                      "--timeout", "10s", "-s", scriptPath, "http://127.0.0.1:\(port)\(path)", "--", bodiesFile, String(offset),
                                                      eachOnce ? "once" : "spread", String(threads)],
                                     standardOutput: .pipe, standardError: .standardOutput)
        // wrk's and PostgreSQL's CPU over the middle of the run (wrk builds its requests first, and prints at the end).
        let window = Swift.max(0.5, Double(seconds) - 1.5)
        usleep(1_000_000)
        let before = (client: processCPUSeconds(child.pid), database: postgresCPUByProcess(), at: ContinuousClock.now)
        usleep(useconds_t(window * 1e6))
        let after = (client: processCPUSeconds(child.pid), database: postgresCPUSeconds(since: before.database), at: ContinuousClock.now)
        let text = String(decoding: child.readToEnd(), as: UTF8.self)
        let status = child.waitForExit()
        guard status == 0, let line = text.split(separator: "\n").first(where: { $0.hasPrefix("wrk-figures ") }) else {
            throw CommandFailure.failed("baton-bench signin: wrk failed (is it installed? scripts/install-deps.sh): \(text.suffix(500))")
        }
        var values: [String: Int] = [:]
        for pair in line.split(separator: " ").dropFirst() {
            let parts = pair.split(separator: "=", maxSplits: 1)
            if parts.count == 2, let value = Int(parts[1]) { values[String(parts[0])] = value }
        }
        guard let requests = values["requests"], let duration = values["duration_us"], duration > 0 else {
            throw CommandFailure.failed("baton-bench signin: wrk's figures are incomplete: \(line)")
        }
        func milliseconds(_ key: String) -> Double { Double(values[key] ?? 0) / 1000 }
        let perSecond = Double(requests) / (Double(duration) / 1e6)
        let elapsed = before.at.duration(to: after.at)
        let windowRequests = Swift.max(1, perSecond * (Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18))
        return WrkFigures(connections: connections, perSecond: perSecond,
                          p50: milliseconds("p50_us"), p99: milliseconds("p99_us"), max: milliseconds("max_us"),
                          requests: requests, errors: values["errors"] ?? 0,
                          clientCPUMicroseconds: (after.client - before.client) / windowRequests * 1e6,
                          databaseCPUMicroseconds: after.database / windowRequests * 1e6)
    }
}

/// A process's CPU time so far, user and system, in seconds (`/proc/PID/stat`); 0 when it cannot be read.
func processCPUSeconds(_ pid: pid_t) -> Double {
    guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
          let end = stat.lastIndex(of: ")") else { return 0 }
    // After the command's closing parenthesis: state is field 3, utime and stime fields 14 and 15.
    let fields = stat[stat.index(after: end)...].split(separator: " ")
    guard fields.count > 12, let user = Double(fields[11]), let system = Double(fields[12]) else { return 0 }
    return (user + system) / Double(sysconf(Int32(_SC_CLK_TCK)))
}

/// The CPU time so far of each process of this machine named `postgres` (the server and its backends), in seconds.
func postgresCPUByProcess() -> [pid_t: Double] {
    let entries = (try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? []
    var seconds: [pid_t: Double] = [:]
    for pid in entries.compactMap(pid_t.init) {
        let name = (try? String(contentsOfFile: "/proc/\(pid)/comm", encoding: .utf8)) ?? ""
        if name.hasPrefix("postgres") { seconds[pid] = processCPUSeconds(pid) }
    }
    return seconds
}

/// PostgreSQL's CPU seconds since `before` (``postgresCPUByProcess()``): what each process alive now spent since.
/// A backend that exited in between (pgbench's, say) is left out instead of taken away from the total.
func postgresCPUSeconds(since before: [pid_t: Double]) -> Double {
    postgresCPUByProcess().reduce(0) { total, process in total + max(0, process.value - (before[process.key] ?? 0)) }
}

/// A `perf record` of a running process for a while, and its samples grouped by where the CPU went: OpenSSL,
/// JSON, libmicrohttpd, libpq, the Swift runtime and concurrency (with Foundation and Dispatch), libc, the
/// kernel, Baton's own code, and the rest.
struct PerfProfile {
    /// Where the samples are written.
    let output: String

    /// Starts recording `pid` (user and kernel, 1,999 Hz, no call graphs) for `seconds`; wait on the result.
    func start(pid: pid_t, seconds: Int) throws -> ChildProcess {
        try ChildProcess("/usr/bin/perf", ["record", "-F", "1999", "-p", String(pid), "-o", output, "--", "sleep", String(seconds)],
                         standardOutput: .pipe, standardError: .standardOutput)
    }

    /// Percentages of the samples by group, largest first (self time of each symbol, summed by group).
    func groups() throws -> [(group: String, percent: Double)] {
        let child = try ChildProcess("/usr/bin/perf", ["report", "-i", output, "--stdio", "--no-children", "--sort", "dso,sym",
                                                       "--percent-limit", "0", "-F", "overhead,dso,sym"], standardOutput: .pipe, standardError: .discard)
        let text = String(decoding: child.readToEnd(), as: UTF8.self)
        guard child.waitForExit() == 0 else { throw CommandFailure.failed("baton-bench signin: perf report failed") }
        var totals: [String: Double] = [:]
        for line in text.split(separator: "\n") where !line.hasPrefix("#") {
            let fields = line.split(separator: " ", maxSplits: 2, omittingEmptySubsequences: true)
            guard fields.count == 3, fields[0].hasSuffix("%"), let percent = Double(fields[0].dropLast()) else { continue }
            totals[PerfProfile.group(dso: String(fields[1]), symbol: String(fields[2])), default: 0] += percent
        }
        return totals.map { ($0.key, $0.value) }.sorted { $0.percent > $1.percent }
    }

    /// The group of one symbol (`symbol` is perf's `[.] name` or `[k] name` column; Swift names stay mangled,
    /// and a mangled name holds its type names as they are written, `JSON` among them), as a key and a label.
    static func group(dso: String, symbol: String) -> String {
        if symbol.hasPrefix("[k]") || dso.hasPrefix("[kernel") || dso.hasPrefix("[vdso") { return "kernel" }
        if symbol.contains("JSON") { return "json" }
        if dso.hasPrefix("libcrypto") || dso.hasPrefix("libssl") { return "openssl" }
        if dso.hasPrefix("libmicrohttpd") { return "libmicrohttpd" }
        if dso.hasPrefix("libpq") { return "libpq" }
        if dso.hasPrefix("libswift") || dso.hasPrefix("libFoundation") || dso.hasPrefix("libdispatch") || dso.hasPrefix("libBlocksRuntime")
            || dso.hasPrefix("lib_FoundationICU") { return "swift_runtime" }
        if dso.hasPrefix("libc.so") || dso.hasPrefix("ld-linux") || dso.hasPrefix("libm.so") { return "libc" }
        if dso.hasPrefix("baton") { return "baton" }
        return "other"
    }

    /// What each group holds, for the printed profile.
    static let labels = [
        "kernel": "kernel (syscalls, scheduler, loopback TCP)", "json": "JSON", "openssl": "OpenSSL", "libmicrohttpd": "libmicrohttpd",
        "libpq": "libpq", "swift_runtime": "Swift runtime, concurrency, Dispatch, Foundation", "libc": "libc (malloc, memcpy, locks)",
        "baton": "Baton's own code", "other": "other libraries",
    ]
}
