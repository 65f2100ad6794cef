import Baton
import BatonReport
import Foundation

/// The demo's story on standard output: numbered steps, each with its figures, written unbuffered so a
/// reader (or a pipe) sees each line as it happens.
struct DemoOutput: Sendable {
    /// Steps in the story.
    let steps: Int

    /// Whether standard output is a terminal (progress bars are redrawn in place there).
    var isTerminal: Bool { isatty(STDOUT_FILENO) == 1 }

    /// Writes `text` as is.
    func write(_ text: String) {
        FileHandle.standardOutput.write(Data(text.utf8))
    }

    /// `[3/11] Title`, after a blank line.
    func step(_ number: Int, _ title: String) {
        write("\n[\(number)/\(steps)] \(title)\n")
    }

    /// A figure line under the current step.
    func line(_ text: String) {
        write("      \(text)\n")
    }
}

/// Fixed, locale-independent formatting of the demo's figures.
enum DemoFormat {
    /// `10,000`.
    static func count(_ value: Int) -> String { ReportFormat.count(value) }

    /// `1.3 s`, `0.04 s`.
    static func seconds(_ value: Double) -> String {
        value < 1 ? String(format: "%.2f s", value) : String(format: "%.1f s", value)
    }

    /// `1,950/s`: `count` events over `seconds`.
    static func rate(_ count: Int, _ seconds: Double) -> String {
        guard seconds > 0 else { return "-" }
        return "\(DemoFormat.count(Int((Double(count) / seconds).rounded())))/s"
    }

    /// `2026-11-29 17:52 UTC`.
    static func timestamp(_ date: Date) -> String {
        var time = time_t(date.timeIntervalSince1970.rounded(.down))
        var parts = tm()
        gmtime_r(&time, &parts)
        return String(format: "%04d-%02d-%02d %02d:%02d UTC", Int(parts.tm_year) + 1900, Int(parts.tm_mon) + 1, Int(parts.tm_mday),
                      Int(parts.tm_hour), Int(parts.tm_min))
    }

    /// `transferred 3,334, not_found 2`: a tally, largest first.
    static func tally(_ counts: [String: Int]) -> String {
        if counts.isEmpty { return "none" }
        return counts.sorted { $0.value != $1.value ? $0.value > $1.value : $0.key < $1.key }
            .map { "\($0.key) \(count($0.value))" }.joined(separator: ", ")
    }
}

/// Measures how long `body` takes, in seconds.
func timed<T>(_ body: () async throws -> T) async rethrows -> (T, Double) {
    let start = ContinuousClock.now
    let value = try await body()
    let elapsed = ContinuousClock.now - start
    return (value, Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18)
}
