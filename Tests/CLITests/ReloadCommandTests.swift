import Foundation
import TestSupport
import Testing

/// `baton serve` deployed before acceptance, as the runbook orders, learns of the acceptance from SIGHUP.
@Suite("baton serve rereads its configuration on SIGHUP")
struct ReloadCommandTests {
    @Test("accepted_at set after start: SIGHUP turns the credential state from authorized to transferred; an invalid file is refused and the service goes on")
    func acceptedAtOnHangUp() async throws {
        try await SchemaWorld.run(.allauth, apple: 1) { world in
            let port = try freeLoopbackPort()
            let config = try world.configuration(port: port)
            let written = try String(contentsOfFile: config, encoding: .utf8)
            /// Replaces the configuration file's text.
            func write(_ text: String) throws { try text.write(toFile: config, atomically: true, encoding: .utf8) }
            var tree = try #require(try JSONSerialization.jsonObject(with: Data(written.utf8)) as? [String: Any])
            var apple = tree["apple"] as! [String: Any]
            var transfer = apple["transfer"] as! [String: Any]
            transfer.removeValue(forKey: "accepted_at")
            apple["transfer"] = transfer
            tree["apple"] = apple
            try write(String(decoding: try JSONSerialization.data(withJSONObject: tree), as: UTF8.self))

            // The sender's walk before the transfer: the user's row gets its transfer identifier.
            let ids = try await runBatonOffPool(["transfer-ids", "--yes", "--rate", "100", "--config", config])
            #expect(ids.status == 0, "\(ids.stdout)\(ids.stderr)")
            let process = try runProcessAsync(batonBinaryPath, ["serve", "--config", config])
            var up = false
            for _ in 0..<200 where !up {
                up = await SchemaHTTP.status("GET", port: port, path: "/healthz") == 200
                if !up { try await Task.sleep(for: .milliseconds(50)) }
            }
            let oldSub = world.people[0].oldSub
            /// The credential state once it is `expected`, polled for up to 5 s after a SIGHUP.
            func stateAfterHangUp(_ expected: String) async throws -> String? {
                process.signal(SIGHUP)
                var state: String?
                for _ in 0..<100 {
                    state = try await world.credentialState(port: port, user: oldSub)
                    if state == expected { break }
                    try await Task.sleep(for: .milliseconds(50))
                }
                return state
            }
            #expect(up)
            #expect(try await world.credentialState(port: port, user: oldSub) == "authorized")

            try write(written)  // accepted_at back: the transfer was accepted
            #expect(try await stateAfterHangUp("transferred") == "transferred")

            try write("{ not json")
            process.signal(SIGHUP)
            try await Task.sleep(for: .milliseconds(300))
            #expect(await SchemaHTTP.status("GET", port: port, path: "/healthz") == 200)
            #expect(try await world.credentialState(port: port, user: oldSub) == "transferred")

            // A sign-in uses an event loop's pipeline connection, which a clean stop closes without calling it dropped.
            let signIn = await SchemaHTTP.signIn(port: port, token: try world.token(world.people[0].id))
            #expect(signIn.status == 200 && signIn.outcome == "migrated", "\(signIn)")

            process.signal(SIGTERM)
            let result = try await offPool { try process.wait(timeout: 30) }
            #expect(result.status == 0)
            #expect(!result.stderr.contains("pipeline connection dropped"), "\(result.stderr)")
            #expect(result.stderr.contains("configuration reloaded") && result.stderr.contains("apple.transfer.accepted_at"), "\(result.stderr)")
            #expect(result.stderr.contains("configuration reload refused"), "\(result.stderr)")
        }
    }
}
