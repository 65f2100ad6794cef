import BatonProcess
import Foundation
import FoundationNetworking
import Testing
import TestSupport

@Suite("baton emulator and baton-bench emulator")
struct EmulatorCommandTests {
    @Test("serves on the port it prints, saves its state, and stops on SIGTERM with exit 0")
    func runsAndStops() async throws {
        let statePath = FileManager.default.temporaryDirectory.appendingPathComponent("cli-emulator-\(UUID().uuidString).json").path
        defer { try? FileManager.default.removeItem(atPath: statePath) }
        let child = try ChildProcess(batonBinaryPath, ["emulator", "--port", "0", "--state", statePath, "--log-level", "error"],
                                     standardInput: .inherit, standardOutput: .pipe, standardError: .discard)
        defer { child.signal(SIGKILL) }

        // The first line announces the URL.
        let text = await offPool { child.readLine() }
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

        child.signal(SIGTERM)
        let status = await child.exitStatus()
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
    ])
    func usageErrors(arguments: [String]) async throws {
        let result = try await offPool { try runBaton(arguments) }
        #expect(result.status == 2)
        #expect(result.stderr.split(separator: "\n").count == 1)
    }

    @Test("baton-bench emulator: a bad option value exits 2 with one line")
    func benchUsageError() async throws {
        let result = try await offPool { try runBatonBench(["emulator", "--concurrency", "0"]) }
        #expect(result.status == 2)
        #expect(result.stderr == "baton-bench emulator: --concurrency must be a whole number from 1 to 1024; run 'baton-bench emulator --help' for usage\n")
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

    @Test("baton-bench emulator ends with one JSON line of figures")
    func bench() async throws {
        let result = try await offPool { try runBatonBench(["emulator", "--requests", "500", "--tokens", "100", "--exchanges", "100", "--concurrency", "4"]) }
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
