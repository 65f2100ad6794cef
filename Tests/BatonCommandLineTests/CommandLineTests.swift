import BatonLogging
import BatonCommandLine
import Testing

/// A command's options of every kind, with a shared group.
private struct SampleOptions: CommandOptions {
    let users = Option.integer("users", default: 1_000, in: 1...10_000, "legacy users")
    let port = Option.integer("port", "P", in: 0...65535, "the port")
    let rate = Option.number("rate", default: 2.5, in: 0.1...100, "per second")
    let name = Option.text("name", "NAME", "a name")
    let out = Option.text("out", "FILE", default: "report.html", "the report")
    let tag = Option.repeatable("tag", "T", "a tag; repeatable")
    let dryRun = Option.flag("dry-run", "change nothing")
    let shape = Option.choice("shape", default: Shape.round, "the shape")
    let logLevel = Option.logLevel()
    let shared = SharedOptions()
}

private struct SharedOptions: CommandOptions {
    let key = Option.text("key", "K", "the key").required()
}

private enum Shape: String, CaseIterable, Sendable {
    case round, square, long = "very-long"
}

private func parse(_ words: [String], positionals: Bool = false) throws -> Parsed<SampleOptions> {
    try Parsed<SampleOptions>(words, takesPositionals: positionals)
}

/// The usage error `words` cause, or nil.
private func usageError(_ words: [String], positionals: Bool = false) -> String? {
    do {
        _ = try parse(words, positionals: positionals)
        return nil
    } catch CommandFailure.usage(let message) {
        return message
    } catch {
        return "not a usage error: \(error)"
    }
}

@Suite("command-line options")
struct CommandLineTests {
    @Test("absent options read as their declared defaults, typed")
    func defaults() throws {
        let parsed = try parse(["--key", "k"])
        #expect(parsed.users == 1_000)
        #expect(parsed.port == nil)
        #expect(parsed.rate == 2.5)
        #expect(parsed.name == nil)
        #expect(parsed.out == "report.html")
        #expect(parsed.tag == [])
        #expect(parsed.dryRun == false)
        #expect(parsed.shape == .round)
        #expect(parsed.logLevel == .info)
        #expect(parsed.shared.key == "k")
    }

    @Test("given values read back typed; the last one wins, a repeatable keeps every one")
    func givenValues() throws {
        let parsed = try parse(["--users", "5", "--users=7", "--port", "0", "--rate", "10", "--name", "a", "--tag", "x", "--tag=y",
                                "--dry-run", "--shape", "very-long", "--log-level", "error", "--key=k2", "--out", "o.html"])
        #expect(parsed.users == 7)
        #expect(parsed.port == 0)
        #expect(parsed.rate == 10)
        #expect(parsed.name == "a")
        #expect(parsed.out == "o.html")
        #expect(parsed.tag == ["x", "y"])
        #expect(parsed.dryRun)
        #expect(parsed.shape == .long)
        #expect(parsed.logLevel == .error)
        #expect(parsed.shared.key == "k2")
    }

    @Test("positionals: '-' is one, '--' ends the options, and a command without them refuses them")
    func positionals() throws {
        let parsed = try parse(["--key", "k", "-", "a", "--", "--users"], positionals: true)
        #expect(parsed.positionals == ["-", "a", "--users"])
        #expect(parsed.users == 1_000)
        #expect(usageError(["--key", "k", "extra"]) == "unexpected argument 'extra'")
    }

    @Test("malformed arguments are usage errors that name the option", arguments: [
        (["--key", "k", "--nope"], "unknown option --nope"),
        (["--key", "k", "--dry-run=yes"], "--dry-run takes no value"),
        (["--key", "k", "--users"], "--users needs a value"),
        (["--key", "k", "--users", "0"], "--users must be a whole number from 1 to 10000"),
        (["--key", "k", "--users", "1.5"], "--users must be a whole number from 1 to 10000"),
        (["--key", "k", "--rate", "inf"], "--rate must be a number from 0.1 to 100.0"),
        (["--key", "k", "--shape", "flat"], "--shape must be round, square or very-long"),
        (["--key", "k", "--log-level", "loud"], "--log-level must be trace, debug, info, notice, warning or error"),
        ([], "missing --key"),
        (["--key", ""], "missing --key"),
    ])
    func malformed(words: [String], message: String) {
        #expect(usageError(words) == message)
    }

    @Test("a range known at run time is checked when read")
    func runtimeRange() throws {
        let parsed = try parse(["--key", "k", "--port", "80"])
        #expect(try parsed.value(of: \.port, default: 1, in: 0...100) == 80)
        #expect(try parse(["--key", "k"]).value(of: \.port, default: 1, in: 0...100) == 1)
        #expect(throws: CommandFailure.self) { try parsed.value(of: \.port, default: 1, in: 0...50) }
    }

    @Test("--help comes from the declarations: order, groups, required ones unbracketed, defaults appended")
    func help() {
        let command = Command(name: "sample", summary: "a sample", arguments: "FILE", options: SampleOptions.self) { _ in 0 }
        #expect(command.options.map(\.name) == ["users", "port", "rate", "name", "out", "tag", "dry-run", "shape", "log-level", "key"])
        let usage = command.usage(path: "baton")
        #expect(usage.hasPrefix("usage: baton sample [--users N] [--port P] [--rate R] [--name NAME]"))
        #expect(usage.contains(" --key K FILE\n"))
        #expect(usage.contains("  --users N  ") && usage.contains("legacy users (default 1000)\n"))
        #expect(usage.contains("the port\n"))
        #expect(usage.contains("per second (default 2.5)\n"))
        #expect(usage.contains("--shape round|square|very-long") && usage.contains("the shape (default round)"))
        #expect(usage.contains("how much to log (default info)"))
    }

    @Test("a command parses the words after its name and runs with them")
    func run() async throws {
        let command = Command(name: "sample", summary: "a sample", options: SampleOptions.self) { parsed in Int32(parsed.users) }
        #expect(try await command.run(["--key", "k", "--users", "42"]) == 42)
        await #expect(throws: CommandFailure.self) { try await command.run(["--users", "42"]) }
    }

    @Test("a program lists its commands under their headings and maps the command word and failures to exit codes")
    func program() async {
        let sample = Command(name: "sample", summary: "a sample", options: SampleOptions.self) { parsed in Int32(parsed.users) }
        let failing = Command(name: "fail", summary: "always fails", options: NoOptions.self) { _ in throw CommandFailure.failed("no") }
        let group = Command(name: "group", summary: "two more", subcommands: [sample, failing])
        let program = Program(name: "tool", version: "tool 1", groups: [("first", [sample]), ("second", [group])])
        #expect(program.usage.hasPrefix("usage: tool <command> [options]\n\nfirst:\n  sample  a sample\n\nsecond:\n  group   two more\n"))
        #expect(await program.run(["--version"]) == 0)
        #expect(await program.run(["sample", "--key", "k", "--users", "7"]) == 7)
        #expect(await program.run(["group", "sample", "--key", "k", "--users", "9"]) == 9)
        #expect(await program.run(["group", "fail"]) == 1)
        #expect(await program.run(["group"]) == 2)
        #expect(await program.run(["sample"]) == 2)
        #expect(await program.run(["nothing"]) == 2)
        #expect(await program.run([]) == 2)
    }
}

private struct NoOptions: CommandOptions {}
