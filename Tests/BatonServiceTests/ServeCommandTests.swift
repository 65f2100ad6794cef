import Baton
import BatonEmulator
import Foundation
import FoundationNetworking
import BatonJSON
import TestSupport
import Testing

@Suite("baton serve (the built binary)")
struct ServeCommandTests {
    @Test("a missing legacy table is a clear start-up error naming it")
    func missingTable() async throws {
        let url = try TestDatabase.create("serve_missing")
        _ = try runBaton(["db", "migrate", "--database-url", url])
        let config = try writeConfig(databaseURL: url, appleBaseURL: "http://127.0.0.1:9", port: 0)
        let result = try await offPool { try runBaton(["serve", "--config", config]) }
        #expect(result.status == 1)
        #expect(result.stderr.contains("legacy.table public.users does not exist"))
    }

    @Test("a client ID in both apple.client_ids and apple.legacy_client_ids stops serve at start-up: exit 2, one line")
    func overlappingClientIDs() async throws {
        let config: JSONValue = [
            "database": ["url": "postgresql:///none?host=/nonexistent-baton-socket-dir"],
            "apple": ["client_ids": ["com.example.app", "com.example.web"], "legacy_client_ids": ["com.example.app"]],
            "legacy": ["table": "public.users", "key_column": "id", "subject_column": "apple_sub", "email_column": "email"],
        ]
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("baton-serve-\(UUID().uuidString).json").path
        try JSON.serialize(config).write(toFile: path, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(atPath: path) }
        let result = try await offPool { try runBaton(["serve", "--config", path]) }
        #expect(result.status == 2)
        #expect(result.stderr.split(separator: "\n").count == 1)
        #expect(result.stderr.contains("apple.legacy_client_ids[0]"))
        // The sample configuration lists no client ID twice.
        let sample = try BatonConfiguration.load(path: packageRoot.appendingPathComponent("sample-config/baton.json").path,
                                                environment: ["BATON_ADMIN_TOKEN": "sample-admin-token-0123456789"])
        #expect(Set(sample.apple.clientIDs).isDisjoint(with: sample.apple.legacyClientIDs))
    }

    @Test("serves sign-ins, logs one line per request without the token, and drains on SIGTERM")
    func servesAndStops() async throws {
        try await ServiceFixture.run(.inProcess, people: 1) { f in
            let port = try freeLoopbackPort()
            let config = try writeConfig(databaseURL: f.url, appleBaseURL: f.emulator.baseURL.absoluteString, port: port)
            let child = try runProcessAsync(batonBinaryPath, ["serve", "--config", config])
            var healthy = false
            for _ in 0..<200 where !healthy {
                healthy = (try? await URLSession.shared.data(from: URL(string: "http://127.0.0.1:\(port)/healthz")!)) != nil
                if !healthy { try await Task.sleep(for: .milliseconds(50)) }
            }
            #expect(healthy)
            let token = try f.token(f.people[0])
            var request = URLRequest(url: URL(string: "http://127.0.0.1:\(port)/v1/signin")!)
            request.httpMethod = "POST"
            request.setValue("application/json", forHTTPHeaderField: "Content-Type")
            request.httpBody = Data(JSON.serializeBytes(.object(["id_token": .string(token)])))
            let (data, response) = try await URLSession.shared.data(for: request)
            #expect((response as? HTTPURLResponse)?.statusCode == 200)
            #expect((try JSON.parse(Array(data)))["outcome"]?.stringValue == "migrated")
            child.signal(SIGTERM)
            let result = try await offPool { try child.wait(timeout: 30) }
            #expect(result.status == 0)
            #expect(result.stdout.contains("baton listening on http://127.0.0.1:\(port)"))
            #expect(result.stderr.contains("route=signin status=200") || result.stderr.contains("outcome=migrated route=signin status=200"))
            #expect(!result.stderr.contains(token))
            #expect(!result.stderr.contains("@privaterelay"))
        }
    }

    private func writeConfig(databaseURL: String, appleBaseURL: String, port: Int) throws -> String {
        let config: JSONValue = [
            "listen": .string("127.0.0.1:\(port)"),
            "database": ["url": .string(databaseURL), "pool_size": 4],
            "apple": ["base_url": .string(appleBaseURL), "client_ids": [.string(ServiceFixture.clientID)]],
            "legacy": ["table": "public.users", "key_column": "id", "subject_column": "apple_sub", "email_column": "email"],
        ]
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("baton-serve-\(UUID().uuidString).json").path
        try JSON.serialize(config).write(toFile: path, atomically: true, encoding: .utf8)
        return path
    }
}

