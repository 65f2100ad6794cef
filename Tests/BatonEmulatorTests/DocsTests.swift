@testable import BatonEmulator
import BatonJSON
import Foundation
import Testing
import TestSupport

/// docs/emulator.md and `baton emulator --help` are checked against the emulator, so neither can rot.
@Suite("docs/emulator.md and baton emulator --help")
struct DocsTests {
    static let docPath = packageRoot.appendingPathComponent("docs/emulator.md").path

    @Test("--help lists every route the emulator serves, each with a line, and points to docs/emulator.md")
    func help() async throws {
        let result = try await runBatonOffPool(["emulator", "--help"])
        #expect(result.status == 0)
        let listed = RouteLine.all(in: result.stdout, pattern: /^  (GET|POST) +(\/\S+) +(\S.*)$/)
        let served = try Emulator(statePath: nil, logger: .disabled()).router().routeTable.map { "\($0.method) \($0.path)" }
        #expect(listed.map(\.route).sorted() == served.sorted(), "\(result.stdout)")
        #expect(result.stdout.contains("docs/emulator.md"))
    }

    @Test("the doc's route table is the help's list, line for line")
    func routeTable() async throws {
        let help = try await runBatonOffPool(["emulator", "--help"]).stdout
        let doc = try String(contentsOfFile: Self.docPath, encoding: .utf8)
        let documented = RouteLine.all(in: doc, pattern: /^\| `(GET|POST) (\/\S+)` \| (.+) \|$/)
        #expect(!documented.isEmpty)
        #expect(documented == RouteLine.all(in: help, pattern: /^  (GET|POST) +(\/\S+) +(\S.*)$/))
    }

    @Test("every ```sh block runs in order against a live baton emulator, PostgreSQL and baton serve; each answer has the shape shown")
    func walkthrough() async throws {
        let doc = try String(contentsOfFile: Self.docPath, encoding: .utf8)
        let steps = Walkthrough.steps(in: doc)
        #expect(steps.count > 10)
        #expect(steps.filter { $0.answer != nil }.count > 10)
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("emulator-doc-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory.appendingPathComponent("bin"), withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        try FileManager.default.createSymbolicLink(atPath: directory.appendingPathComponent("bin/baton").path, withDestinationPath: batonBinaryPath)

        try await withDatabase("emulator_doc") { database in
            // The doc's ports and database, replaced by free ones and the test's: each must occur, or the run would
            // not be the doc's.
            let emulatorPort = try freeLoopbackPort(), batonPort = try freeLoopbackPort()
            let replacements = [("127.0.0.1:8090", "127.0.0.1:\(emulatorPort)"), ("--port 8090", "--port \(emulatorPort)"),
                                ("127.0.0.1:8080", "127.0.0.1:\(batonPort)"), ("postgresql:///walkthrough", database)]
            var script = """
                set -euo pipefail
                trap 'kill $(jobs -p) 2>/dev/null || true' EXIT
                cd '\(directory.path)'
                export PATH='\(directory.path)/bin':"$PATH"

                """
            for (index, step) in steps.enumerated() {
                script += "printf '\\n@@step \(index)\\n'\n\(step.shell)\n"
            }
            for (doc, test) in replacements {
                #expect(script.contains(doc), "the doc no longer says \(doc)")
                script = script.replacingOccurrences(of: doc, with: test)
            }
            let run = script
            let result = try await offPool { try runProcess("/bin/bash", ["-c", run], timeout: 600) }
            guard result.status == 0 else {
                Issue.record("the walkthrough stopped with status \(result.status)\nstdout:\n\(result.stdout)\nstderr:\n\(result.stderr)")
                return
            }
            let outputs = Walkthrough.outputs(result.stdout, steps: steps.count)
            for (index, step) in steps.enumerated() {
                guard let answer = step.answer else { continue }
                let documented = try JSON.parse(Array(answer.utf8))
                let printed = outputs[index].trimmingCharacters(in: .whitespacesAndNewlines)
                guard let actual = try? JSON.parse(Array(printed.utf8)) else {
                    Issue.record("step \(index) printed no JSON:\n\(step.shell)\n→ \(printed)")
                    continue
                }
                #expect(Walkthrough.sameShape(documented, actual), "step \(index):\n\(step.shell)\ndocumented \(answer)\nprinted \(printed)")
            }
        }
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

/// The doc's shell blocks and the answers it shows.
enum Walkthrough {
    /// A ```sh block and, when the next fenced block is ```json, that answer.
    struct Step {
        var shell: String
        var answer: String?
    }

    /// The fenced blocks of `markdown` as steps, in order.
    static func steps(in markdown: String) -> [Step] {
        var blocks: [(language: String, body: String)] = []
        var current: (language: String, lines: [Substring])?
        for line in markdown.split(separator: "\n", omittingEmptySubsequences: false) {
            if line.hasPrefix("```") {
                if let open = current {
                    blocks.append((open.language, open.lines.joined(separator: "\n")))
                    current = nil
                } else {
                    current = (String(line.dropFirst(3)), [])
                }
            } else {
                current?.lines.append(line)
            }
        }
        var steps: [Step] = []
        for (index, block) in blocks.enumerated() where block.language == "sh" {
            let next = blocks.indices.contains(index + 1) ? blocks[index + 1] : nil
            steps.append(Step(shell: block.body, answer: next?.language == "json" ? next?.body : nil))
        }
        return steps
    }

    /// What each step printed, split at the `@@step N` markers.
    static func outputs(_ stdout: String, steps: Int) -> [String] {
        var outputs = Array(repeating: "", count: steps)
        var index: Int?
        for line in stdout.split(separator: "\n", omittingEmptySubsequences: false) {
            if let marker = line.wholeMatch(of: /@@step (\d+)/) {
                index = Int(marker.1)
            } else if let index, index < steps {
                outputs[index] += line + "\n"
            }
        }
        return outputs
    }

    /// Whether `actual` has the shape of the documented answer: the same JSON types; the same member names
    /// (an object keyed by Apple identifiers is a map: the same number of members); arrays of the same length;
    /// strings the emulator or Baton makes afresh (identifiers, keys, tokens, times, relay addresses) of the same
    /// kind, every other string and every Boolean equal.
    static func sameShape(_ documented: JSONValue, _ actual: JSONValue) -> Bool {
        switch (documented, actual) {
        case (.object(let expected), .object(let got)):
            let isMap = !expected.isEmpty && expected.keys.allSatisfy { kind(of: $0) == .appleIdentifier }
            if isMap {
                return expected.count == got.count && got.keys.allSatisfy { kind(of: $0) == .appleIdentifier }
                    && zip(expected.map(\.value), got.map(\.value)).allSatisfy { sameShape($0, $1) }
            }
            return Set(expected.keys) == Set(got.keys) && expected.allSatisfy { member in sameShape(member.value, got[member.key]!) }
        case (.array(let expected), .array(let got)):
            return expected.count == got.count && zip(expected, got).allSatisfy { sameShape($0, $1) }
        case (.string(let expected), .string(let got)):
            let kind = kind(of: expected)
            return kind == .fixed ? expected == got : kind == self.kind(of: got)
        case (.number, .number), (.null, .null):
            return true
        case (.bool(let expected), .bool(let got)):
            return expected == got
        default:
            return false
        }
    }

    /// Kinds of strings made afresh on every run.
    enum Kind {
        case appleIdentifier, isoTime, jws, relayEmail, pem, tenCharacters, opaque, fixed
    }

    static func kind(of text: String) -> Kind {
        if text.wholeMatch(of: /\d{6}\.[0-9a-f]{32}\.\d{4}/) != nil { return .appleIdentifier }
        if text.wholeMatch(of: /\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ/) != nil { return .isoTime }
        if text.wholeMatch(of: /eyJ[\w-]+\.[\w-]+\.[\w-]+/) != nil { return .jws }
        if text.wholeMatch(of: /[a-z0-9]{10}@privaterelay\.appleid\.com/) != nil { return .relayEmail }
        if text.hasPrefix("-----BEGIN PRIVATE KEY-----") { return .pem }
        if text.wholeMatch(of: /[A-Z0-9]{10}/) != nil { return .tenCharacters }
        if text.wholeMatch(of: /[acr][0-9a-f]{48}/) != nil { return .opaque }
        return .fixed
    }
}
