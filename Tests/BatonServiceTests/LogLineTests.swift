@testable import BatonService
import Foundation
@testable import BatonLogging
import Synchronization
import Testing

/// The hand-built parts of a request's log line print what Foundation's formatters printed.
@Suite("Log line fields")
struct LogLineTests {
    @Test("durations print as %.2f milliseconds", arguments: [0.0, 0.000_004, 0.000_005_1, 0.001, 0.012_345, 0.099_999, 1.5, 12.345_678])
    func milliseconds(seconds: Double) {
        #expect(BatonAPI.milliseconds(seconds) == String(format: "%.2f", seconds * 1000))
    }

    @Test("timestamps print as ISO 8601 UTC with milliseconds, no zone",
          arguments: [(0, 0), (1_000_000_000, 7), (1_795_892_329, 412), (951_782_400, 999), (4_102_444_799, 50)])
    func timestamp(seconds: Int, milliseconds: Int) {
        let date = Date(timeIntervalSince1970: Double(seconds) + Double(milliseconds) / 1000 + 0.000_1)
        let expected = date.formatted(.iso8601.year().month().day().time(includingFractionalSeconds: true))
        #expect(Logger.timestamp(seconds: seconds, milliseconds: milliseconds) == expected)
    }

    @Test("a log line starts with the current timestamp")
    func lineStartsWithTimestamp() {
        let line = Logger.format(level: .info, label: "test", message: "m", metadata: [:])
        let stamp = line.dropFirst(3).prefix { $0 != " " }
        #expect(line.hasPrefix("ts=") && stamp.count == 23 && stamp.dropFirst(10).first == "T")
    }

    @Test("every control character is escaped, so a value cannot end the line, forge one or carry escapes",
          arguments: ["a\nlevel=error", "esc\u{1B}[31m", "nel\u{85}x", "ls\u{2028}x", "ps\u{2029}x", "nul\u{0}x", "del\u{7F}", "tab\tx", "back\\slash"])
    func controlsEscaped(value: String) {
        let line = Logger.format(level: .info, label: "test", message: value, metadata: ["field": value])
        #expect(!line.unicodeScalars.contains { $0.value < 0x20 || (0x7F...0x9F).contains($0.value) || $0.value == 0x2028 || $0.value == 0x2029 })
        #expect(line.contains("msg=\""))
    }
}

@Suite("The logger's handler seam")
struct LogHandlerTests {
    @Test("a handler receives each event at or above the level, structured: level, label, message, merged metadata")
    func structuredEvents() {
        let events = Mutex<[Logger.Event]>([])
        let logger = Logger(label: "baton.test", level: .info, metadata: ["route": "signin", "outcome": "x"]) { event in
            events.withLock { $0.append(event) }
        }
        logger.debug("dropped")
        logger.with("request", "r1").warning("slow\nline", ["outcome": "migrated", "email": Logger.maskEmail("jane@example.com")])
        let received = events.withLock { $0 }
        #expect(received == [Logger.Event(level: .warning, label: "baton.test", message: "slow\nline",
                                          metadata: ["route": "signin", "request": "r1", "outcome": "migrated", "email": "j***@example.com"])])
        // The default output is the same event as Baton's one line: escaped, keys sorted, the email masked by the caller.
        let line = received[0].line
        #expect(line.hasPrefix("ts=") && line.hasSuffix(#" level=warning label=baton.test msg="slow\nline" email=j***@example.com outcome=migrated request=r1 route=signin"#), "\(line)")
    }

    @Test("Logger.lines hands each formatted line to a writer")
    func lines() {
        let written = Mutex<[String]>([])
        let logger = Logger(label: "l", level: .trace, handler: Logger.lines { line in written.withLock { $0.append(line) } })
        logger.trace("t", ["k": "v w"])
        #expect(written.withLock { $0 }.count == 1)
        #expect(written.withLock { $0 }.first?.hasSuffix(#"level=trace label=l msg=t k="v w""#) == true)
    }
}
