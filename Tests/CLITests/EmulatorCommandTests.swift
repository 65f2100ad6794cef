import Foundation
import Glibc
import FoundationNetworking
import Testing
import TestSupport

@Suite("baton emulator and baton bench emulator")
struct EmulatorCommandTests {
    @Test("serves on the port it prints, saves its state, and stops on SIGTERM with exit 0")
    func runsAndStops() async throws {
        let statePath = FileManager.default.temporaryDirectory.appendingPathComponent("cli-emulator-\(UUID().uuidString).json").path
        defer { try? FileManager.default.removeItem(atPath: statePath) }
        let child = try SpawnedChild(batonBinaryPath, ["emulator", "--port", "0", "--state", statePath, "--log-level", "error"])
        defer { child.kill(SIGKILL) }

        // The first line announces the URL.
        let text = try await offPool { child.readLine() }
        let prefix = "emulator listening on "
        #expect(text.hasPrefix(prefix))
        let base = text.dropFirst(prefix.count).trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(base.hasPrefix("http://127.0.0.1:"))

        var request = URLRequest(url: URL(string: base + "/emulator/teams")!)
        request.httpMethod = "POST"
        request.httpBody = Data(#"{"team_id":"CLITEAM001"}"#.utf8)
        let (_, created) = try await URLSession.shared.data(for: request)
        #expect((created as? HTTPURLResponse)?.statusCode == 201)
        let (keys, response) = try await URLSession.shared.data(from: URL(string: base + "/auth/keys")!)
        #expect((response as? HTTPURLResponse)?.statusCode == 200)
        #expect(String(decoding: keys, as: UTF8.self).contains("\"kty\":\"RSA\""))

        child.kill(SIGTERM)
        let status = try await offPool { child.wait() }
        #expect(status == 0)
        let saved = try String(contentsOfFile: statePath, encoding: .utf8)
        #expect(saved.contains("CLITEAM001"))
    }

    @Test("usage errors exit 2", arguments: [
        ["emulator", "--port", "notaport"],
        ["emulator", "--port", "70000"],
        ["emulator", "extra"],
        ["emulator", "--log-level", "loud"],
        ["emulator", "--host", "not-an-address", "--port", "0"],
        ["bench"],
        ["bench", "nothing"],
        ["bench", "emulator", "--concurrency", "0"],
    ])
    func usageErrors(arguments: [String]) async throws {
        let result = try await offPool { try runBaton(arguments) }
        #expect(result.status == 2)
        #expect(result.stderr.split(separator: "\n").count == 1)
    }

    @Test("a state file that cannot be read fails with exit 1")
    func badStateFile() async throws {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("bad-\(UUID().uuidString).json").path
        defer { try? FileManager.default.removeItem(atPath: path) }
        try "[]".write(toFile: path, atomically: true, encoding: .utf8)
        let result = try await offPool { try runBaton(["emulator", "--port", "0", "--state", path]) }
        #expect(result.status == 1)
        #expect(result.stderr.contains("state_file"))
    }

    @Test("bench emulator ends with one JSON line of figures")
    func bench() async throws {
        let result = try await offPool { try runBaton(["bench", "emulator", "--requests", "500", "--tokens", "100", "--exchanges", "100", "--concurrency", "4"]) }
        #expect(result.status == 0, "\(result.stderr)")
        let last = try #require(result.stdout.split(separator: "\n").last)
        let figures = try #require(try JSONSerialization.jsonObject(with: Data(last.utf8)) as? [String: Any])
        #expect(figures["benchmark"] as? String == "emulator")
        #expect((figures["keys_requests_per_s"] as? Int ?? 0) > 0)
        #expect((figures["authorize_tokens_per_s"] as? Int ?? 0) > 0)
        #expect((figures["exchange_requests_per_s"] as? Int ?? 0) > 0)
        #expect(figures["errors"] as? Int == 0)
        #expect(figures["concurrency"] as? Int == 4)
    }
}

/// A child started with `posix_spawn` whose standard output can be read line by line while it
/// runs, and which is reaped with `waitpid` (Foundation's `Process` can hang waiting on Linux).
final class SpawnedChild: @unchecked Sendable {
    // `pid` and `output` are set once in `init`; `readLine` and `wait` are called from one test
    // at a time, and `reaped` only by `wait` and `kill` on that test's path.
    let pid: pid_t
    private let output: Int32
    private var buffer: [UInt8] = []
    private var reaped = false

    init(_ executable: String, _ arguments: [String]) throws {
        var pipeEnds: [Int32] = [0, 0]
        guard pipe(&pipeEnds) == 0 else { throw TestSupportError("pipe() failed") }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_adddup2(&actions, pipeEnds[1], 1)
        posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0)
        posix_spawn_file_actions_addclose(&actions, pipeEnds[0])
        posix_spawn_file_actions_addclose(&actions, pipeEnds[1])
        let argv = ([executable] + arguments).map { strdup($0) } + [nil]
        defer { argv.forEach { free($0) } }
        var child: pid_t = 0
        let spawned = posix_spawn(&child, executable, &actions, nil, argv, environ)
        close(pipeEnds[1])
        guard spawned == 0 else {
            close(pipeEnds[0])
            throw TestSupportError("could not start \(executable): error \(spawned)")
        }
        pid = child
        output = pipeEnds[0]
    }

    deinit { close(output) }

    /// The next line of standard output (without the newline); what is left at end of output.
    func readLine() -> String {
        var chunk = [UInt8](repeating: 0, count: 512)
        while !buffer.contains(UInt8(ascii: "\n")) {
            let count = read(output, &chunk, chunk.count)
            guard count > 0 else { break }
            buffer.append(contentsOf: chunk[..<count])
        }
        let end = buffer.firstIndex(of: UInt8(ascii: "\n")) ?? buffer.endIndex
        let line = String(decoding: buffer[..<end], as: UTF8.self)
        buffer.removeSubrange(..<min(buffer.endIndex, end + 1))
        return line
    }

    /// Sends `signal` unless the child has been reaped.
    func kill(_ signal: Int32) {
        if !reaped { Glibc.kill(pid, signal) }
    }

    /// Waits for the child; its exit status, or 128 + the signal that ended it.
    func wait() -> Int32 {
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
        reaped = true
        let signal = status & 0x7f
        return signal == 0 ? (status >> 8) & 0xff : 128 + signal
    }
}
