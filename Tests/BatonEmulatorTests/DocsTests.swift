@testable import BatonEmulator
import Foundation
import Testing
import TestSupport

/// `baton emulator --help` is checked against the emulator's routes.
@Suite("docs/emulator.md and baton emulator --help")
struct DocsTests {
    @Test("--help lists every route the emulator serves, each with a line, and points to docs/emulator.md")
    func help() async throws {
        let result = try await runBatonOffPool(["emulator", "--help"])
        #expect(result.status == 0)
        let listed = RouteLine.all(in: result.stdout, pattern: /^  (GET|POST) +(\/\S+) +(\S.*)$/)
        let served = try Emulator(statePath: nil, logger: .disabled()).router().routeTable.map { "\($0.method) \($0.path)" }
        #expect(listed.map(\.route).sorted() == served.sorted(), "\(result.stdout)")
        #expect(result.stdout.contains("docs/emulator.md"))
    }
}

/// A route as the help or the doc's table lists it.
struct RouteLine: Equatable, CustomStringConvertible {
    var route: String
    var summary: String

    var description: String { "\(route): \(summary)" }

    /// Every line of `text` that `pattern` matches (method, path, summary).
    static func all(in text: String, pattern: Regex<(Substring, Substring, Substring, Substring)>) -> [RouteLine] {
        text.split(separator: "\n").compactMap { line in
            line.wholeMatch(of: pattern).map { RouteLine(route: "\($0.1) \($0.2)", summary: String($0.3)) }
        }
    }
}
