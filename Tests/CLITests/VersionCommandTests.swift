import BatonBuildInfo
import Foundation
import TestSupport
import Testing

/// Runs git with `arguments` in `directory`, failing the test when git does.
private func git(_ directory: URL, _ arguments: [String]) throws -> String {
    let result = try runProcess("/usr/bin/env", ["git", "-C", directory.path, "-c", "user.name=Baton", "-c", "user.email=baton@example.com",
                                                 "-c", "commit.gpgsign=false"] + arguments)
    guard result.status == 0 else { throw TestSupportError("git \(arguments): \(result.stderr)") }
    return result.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
}

/// Runs scripts/build-commit.sh for the package at `package` and returns the commit it recorded.
private func recordedCommit(_ package: URL, output: URL, environment: [String: String]? = nil) throws -> String {
    let script = packageRoot.appendingPathComponent("scripts/build-commit.sh").path
    let result = try runProcess("/bin/sh", [script, package.path, output.path], environment: environment)
    guard result.status == 0 else { throw TestSupportError("build-commit.sh: \(result.stderr)") }
    let text = try String(contentsOf: output, encoding: .utf8)
    guard let line = text.split(separator: "\n").first(where: { $0.hasPrefix("let buildCommit = \"") }), line.hasSuffix("\"") else {
        throw TestSupportError("build-commit.sh wrote \(text)")
    }
    return String(line.dropFirst("let buildCommit = \"".count).dropLast())
}

@Suite("baton --version and the recorded commit")
struct VersionCommandTests {
    @Test("--version prints the version and the commit HEAD names, as the test build records them")
    func version() throws {
        let result = try runBaton(["--version"])
        #expect(result.status == 0)
        #expect(result.stdout == "baton \(BuildInfo.version) (commit \(BuildInfo.commit))\n")
        let head = try git(packageRoot, ["rev-parse", "HEAD"])
        #expect(BuildInfo.commit == head || BuildInfo.commit == head + "-dirty", "built from \(BuildInfo.commit), HEAD is \(head)")
    }

    @Test("build-commit.sh: HEAD's commit, -dirty for changed or new files, unknown outside a work tree's top, rewritten only on a change")
    func script() throws {
        let scratch = FileManager.default.temporaryDirectory.appendingPathComponent("baton-commit-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: scratch) }
        let repository = scratch.appendingPathComponent("repository")
        let nested = repository.appendingPathComponent("nested")
        let output = scratch.appendingPathComponent("out/BuildCommit.swift")
        try FileManager.default.createDirectory(at: nested, withIntermediateDirectories: true)

        #expect(try recordedCommit(repository, output: output) == "unknown")
        _ = try git(repository, ["init", "-q"])
        #expect(try recordedCommit(repository, output: output) == "unknown", "a repository without a commit")

        try Data("one\n".utf8).write(to: repository.appendingPathComponent("file"))
        _ = try git(repository, ["add", "file"])
        _ = try git(repository, ["commit", "-q", "-m", "one"])
        let head = try git(repository, ["rev-parse", "HEAD"])
        #expect(try recordedCommit(nested, output: output) == "unknown", "a source tree inside another repository")
        #expect(try recordedCommit(scratch, output: output, environment: ["GIT_DIR": repository.appendingPathComponent(".git").path]) == "unknown",
                "GIT_DIR from the environment")
        #expect(try recordedCommit(repository, output: output) == head)

        try FileManager.default.setAttributes([.modificationDate: Date(timeIntervalSince1970: 0)], ofItemAtPath: output.path)
        #expect(try recordedCommit(repository, output: output) == head)
        let unchanged = try FileManager.default.attributesOfItem(atPath: output.path)[.modificationDate] as? Date
        #expect(unchanged == Date(timeIntervalSince1970: 0), "the same commit leaves the file as it was, so nothing recompiles")

        try Data("two\n".utf8).write(to: repository.appendingPathComponent("file"))
        #expect(try recordedCommit(repository, output: output) == head + "-dirty")
        _ = try git(repository, ["checkout", "-q", "file"])
        try Data("new\n".utf8).write(to: repository.appendingPathComponent("untracked"))
        #expect(try recordedCommit(repository, output: output) == head + "-dirty")
    }
}
