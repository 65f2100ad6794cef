import Foundation
import BatonConcurrency
import Synchronization
import TestSupport
import Testing
@testable import BatonHTTPServer

/// The per-address limit at a proxy's size, with the figures it costs printed (`addrlimit scale:` lines).
@Suite("Connections per address at a proxy's size")
struct AddressLimitScaleTests {
    @Test("1,000 connections held at a limit of 1,000: 1,000 more are answered 503 while another address is served", arguments: [0, 2])
    func thousandsAtTheLimit(loops: Int) async throws {
        var configuration = serving(loops: loops, connectionsPerAddress: 1_000)
        configuration.connectionLimit = 8_192
        try await withServer(echoRouter(), configuration: configuration) { _, port in
            let held = try await offPool { try OpenConnections(port: port, count: 1_000) }
            #expect(held.bodies.allSatisfy { $0 == "hello nobody from 127.0.0.1" })
            let idle = await offPool { timed(20) { request(from: "127.0.0.2", port: port) } }
            let done = Atomic<Bool>(false)
            let (processBefore, threadsBefore) = (processSeconds(), threadSeconds())
            let start = ContinuousClock.now
            // Another address's client, on a thread of its own, one request every 10 ms.
            async let other = onThreads(1) { _ -> (latencies: [Duration], answers: Set<String?>) in
                var answers: Set<String?> = []
                var latencies: [Duration] = []
                repeat {
                    let (latency, answer) = timed(1) { request(from: "127.0.0.2", port: port) }
                    latencies += latency
                    answers.formUnion(answer)
                    usleep(10_000)
                } while !done.load(ordering: .relaxed)
                return (latencies.sorted(), answers)
            }
            // 50 clients, each opening 20 connections one after another.
            let refused = await onThreads(50) { _ in (0..<20).map { _ in request(from: "127.0.0.1", port: port) } }
            let storm = ContinuousClock.now - start
            done.store(true, ordering: .relaxed)
            let (latencies, answers) = await other[0]
            let threadsAfter = threadSeconds()
            // The server's threads (and any other that existed before the clients' threads): what refusing cost it.
            let server = threadsBefore.reduce(0) { $0 + (threadsAfter[$1.key] ?? $1.value) - $1.value }
            let refusal = #"503 {"error":"too_many_connections","reason":"this address already holds 1000 connections; reuse one or retry later"}"#
            #expect(Set(refused.joined()) == [refusal])
            #expect(answers == ["200 hello nobody from 127.0.0.2"])
            print("addrlimit scale loops=\(loops): 1,000 refused in \(storm) (CPU: process \(processSeconds() - processBefore) s, server \(server) s);",
                  "127.0.0.2 meanwhile \(latencies.count) requests, median \(latencies[latencies.count / 2]), max \(latencies.last!);",
                  "before, median \(idle.0.sorted()[10]), max \(idle.0.max()!)")
        }
    }
}

/// Runs `body` `count` times: how long each took, and what they returned.
private func timed<T>(_ count: Int, _ body: () -> T) -> ([Duration], [T]) {
    var latencies: [Duration] = [], results: [T] = []
    for _ in 0..<count {
        let began = ContinuousClock.now
        results.append(body())
        latencies.append(ContinuousClock.now - began)
    }
    return (latencies, results)
}

/// CPU seconds (user and system) this process has used.
private func processSeconds() -> Double {
    var usage = rusage()
    getrusage(__rusage_who_t(RUSAGE_SELF.rawValue), &usage)
    return Double(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) + Double(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6
}

/// CPU seconds of each of this process's threads, by thread id (`/proc/self/task`).
private func threadSeconds() -> [String: Double] {
    let tasks = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/task")) ?? []
    let ticks = Double(sysconf(Int32(_SC_CLK_TCK)))
    var seconds: [String: Double] = [:]
    for task in tasks {
        guard let stat = try? String(contentsOfFile: "/proc/self/task/\(task)/stat", encoding: .utf8),
              let end = stat.lastIndex(of: ")") else { continue }
        // After the command's closing parenthesis: utime and stime are the 12th and 13th fields, in clock ticks.
        let fields = stat[stat.index(after: end)...].split(separator: " ")
        seconds[task] = ((Double(fields[11]) ?? 0) + (Double(fields[12]) ?? 0)) / ticks
    }
    return seconds
}
