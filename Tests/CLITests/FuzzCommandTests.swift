import BatonEmulator
import Foundation
import FoundationNetworking
import Testing
import TestSupport

@Suite("baton-bench fuzz http")
struct FuzzCommandTests {
    @Test("2,000 random and mutated requests leave the emulator up, answering as before, its memory bounded")
    func emulatorSurvives() async throws {
        try await withEmulator { emulator in
            let team = try emulator.createTeam()
            try emulator.createApp(clientID: "com.example.fuzz", teamID: team.teamID)
            let user = try #require(try emulator.createUsers(clientID: "com.example.fuzz", count: 1).first)
            let keysBefore = try await fetch(emulator.baseURL, "/auth/keys")

            let url = emulator.baseURL.absoluteString
            let result = try await offPool {
                try runBatonBench(["fuzz", "http", "--url", url, "--requests", "2000", "--seed", "7", "--pid", String(getpid()), "--concurrency", "4"])
            }
            #expect(result.status == 0, "\(result.stdout)\n\(result.stderr)")
            let last = try #require(result.stdout.split(separator: "\n").last)
            let figures = try #require(try JSONSerialization.jsonObject(with: Data(last.utf8)) as? [String: Any])
            #expect(figures["requests"] as? Int == 2000)
            #expect(figures["failures"] as? Int == 0)
            #expect((figures["statuses"] as? [String: Int])?["400"] ?? 0 > 0, "broken requests get 400s")
            #expect(figures["rss_kib_after"] as? Int ?? 0 > 0)

            // Afterwards, well-formed requests get the answers they got before, or the ones they are owed.
            let keysAfter = try await fetch(emulator.baseURL, "/auth/keys")
            #expect(keysAfter.status == 200)
            #expect(keysAfter.body == keysBefore.body)
            var request = URLRequest(url: emulator.baseURL.appendingPathComponent("emulator/authorize"))
            request.httpMethod = "POST"
            request.setValue("application/json", forHTTPHeaderField: "Content-Type")
            request.httpBody = Data(#"{"client_id":"com.example.fuzz","user":"\#(user.id)","nonce":"n"}"#.utf8)
            let (data, response) = try await URLSession.shared.data(for: request)
            #expect((response as? HTTPURLResponse)?.statusCode == 200)
            #expect(String(decoding: data, as: UTF8.self).contains("id_token"))
        }
    }

    @Test("scripts/fuzz-http.sh serve: 400 requests, links with session nonces and sign-ins with minted tokens among them, every error a documented code")
    func serveModeSurvives() async throws {
        try await withDatabase("fuzz") { url in
            let script = packageRoot.appendingPathComponent("scripts/fuzz-http.sh").path
            let result = try await offPool {
                try runProcess(script, ["serve"], environment: ["BATON_TEST_DATABASE_URL": url, "BATON": batonBinaryPath,
                                                                "FUZZ_REQUESTS": "400", "FUZZ_SEED": "11"])
            }
            #expect(result.status == 0, "\(result.stdout)\n\(result.stderr)")
            let last = try #require(result.stdout.split(separator: "\n").first { $0.hasPrefix("{") })
            let figures = try #require(try JSONSerialization.jsonObject(with: Data(last.utf8)) as? [String: Any])
            #expect(figures["failures"] as? Int == 0)
            let errors = try #require(figures["errors"] as? [String: Int], "serve mode counts the error codes")
            #expect(errors["invalid_token/nonce_mismatch"] ?? 0 > 0, "sign-ins with another nonce or a 64-hex web nonce are refused")
            #expect(errors["not_configured"] == nil, "re-linking is configured: no 501")
            #expect((figures["statuses"] as? [String: Int])?["201"] ?? 0 > 0, "link sessions are opened")
            #expect(result.stdout.contains("sign-in after fuzzing: {\"outcome\""))
        }
    }

    @Test("a server that is not there is a failure (exit 1), not a silent pass")
    func deadServerFails() async throws {
        let emulator = try await AppleEmulator.start()
        let url = emulator.baseURL.absoluteString
        await emulator.stop()
        let result = try await offPool { try runBatonBench(["fuzz", "http", "--url", url, "--requests", "10"]) }
        #expect(result.status == 1)
        #expect(result.stdout.contains("FAILURE: probe GET /auth/keys got no answer before fuzzing"))
    }

    @Test("usage errors exit 2; nothing but loopback is ever a target", arguments: [
        ["fuzz"],
        ["fuzz", "http"],
        ["fuzz", "http", "--url", "http://10.0.0.1:8080"],
        ["fuzz", "http", "--url", "http://example.com:80"],
        ["fuzz", "http", "--url", "https://127.0.0.1:8443"],
        ["fuzz", "http", "--url", "http://127.0.0.1:8080", "--requests", "0"],
        ["fuzz", "http", "--url", "http://127.0.0.1:8080", "--seed", "-1"],
        ["fuzz", "http", "--url", "http://127.0.0.1:8080", "--paths", "auth"],
        ["fuzz", "http", "--url", "http://127.0.0.1:8080", "--pid", "0"],
    ])
    func usageErrors(arguments: [String]) async throws {
        let result = try await offPool { try runBatonBench(arguments) }
        #expect(result.status == 2)
        #expect(result.stderr.split(separator: "\n").count == 1)
    }

    private func fetch(_ base: URL, _ path: String) async throws -> (status: Int, body: Data) {
        let (data, response) = try await URLSession.shared.data(from: base.appendingPathComponent(String(path.dropFirst())))
        return ((response as? HTTPURLResponse)?.statusCode ?? 0, data)
    }
}
