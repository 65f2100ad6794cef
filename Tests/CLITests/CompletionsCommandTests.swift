import Foundation
import TestSupport
import Testing

/// `baton completions bash`, run by bash itself: the script the built binary prints is sourced, `COMP_WORDS` is
/// set as bash sets it at a Tab, and the candidates are read back from `COMPREPLY`.
@Suite("baton completions bash")
struct CompletionsCommandTests {
    /// The script, written once to a temporary directory that also holds a file for file-name completion.
    static let script: (directory: KeyDirectory, path: String) = {
        let directory = try! KeyDirectory()
        let result = try! runBaton(["completions", "bash"])
        precondition(result.status == 0, "baton completions bash failed: \(result.stderr)")
        let path = directory.path("baton.bash")
        try! Data(result.stdout.utf8).write(to: URL(fileURLWithPath: path))
        try! directory.write("baton.json", "{}")
        return (directory, path)
    }()

    /// The candidates for the last word of `words` (bash's word split, `=` as its own word after an option).
    private func complete(_ words: [String]) throws -> [String] {
        let body = #"source "$1"; shift; COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); _baton; printf '%s\n' "${COMPREPLY[@]}""#
        let result = try runProcess("/bin/bash", ["-c", body, "bash", Self.script.path] + words)
        #expect(result.status == 0, "bash: \(result.stderr)")
        return result.stdout.split(separator: "\n").map(String.init)
    }

    @Test("the first word is a command")
    func commands() throws {
        let all = try complete(["baton", ""])
        for name in ["verify", "doctor", "serve", "exchange", "report", "completions", "--help"] { #expect(all.contains(name)) }
        #expect(try complete(["baton", "se"]) == ["serve"])
        #expect(try complete(["baton", "db", ""]) == ["migrate", "status", "--help"])
        #expect(try complete(["baton", "completions", "b"]) == ["bash"])
        for workbench in ["bench", "fuzz"] { #expect(!all.contains(workbench), "\(workbench) is baton-bench's, not baton's") }
    }

    @Test("each command offers the options its --help lists", arguments: DbMigrateCommandTests.options)
    func options(command: [String], options: [String]) throws {
        let offered = try complete(["baton"] + command + ["--"])
        for option in options { #expect(offered.contains("--\(option)"), "--\(option) not offered after 'baton \(command.joined(separator: " "))'") }
        #expect(offered.contains("--help"))
    }

    @Test("a choice offers its words, also as --name=value")
    func choices() throws {
        #expect(try complete(["baton", "report", "--format", ""]) == ["table", "csv", "json", "html"])
        #expect(try complete(["baton", "report", "--format", "c"]) == ["csv"])
        #expect(try complete(["baton", "report", "--format", "=", "j"]) == ["json"])
        #expect(try complete(["baton", "serve", "--log-level", "w"]) == ["warning"])
    }

    @Test("a file option offers file names; another value offers nothing")
    func values() throws {
        let prefix = Self.script.directory.path("baton.j")
        #expect(try complete(["baton", "serve", "--config", prefix]) == [Self.script.directory.path("baton.json")])
        #expect(try complete(["baton", "import", "transfers", prefix]) == [Self.script.directory.path("baton.json")])
        #expect(try complete(["baton", "serve", "--port", ""]) == [])
    }

    @Test("an option already given is not offered again")
    func given() throws {
        let offered = try complete(["baton", "serve", "--config", "baton.json", "--"])
        #expect(!offered.contains("--config"))
        #expect(offered.contains("--port"))
    }
}
