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
            let (config, accepted) = try world.configurationBeforeAcceptance(port: port)
            /// Replaces the configuration file's text.
            func write(_ text: String) throws { try text.write(toFile: config, atomically: true, encoding: .utf8) }
            // The sender's walk before the transfer: the user's row gets its transfer identifier.
            let ids = try await runBatonOffPool(["transfer-ids", "--yes", "--rate", "100", "--config", config])
            #expect(ids.status == 0, "\(ids.stdout)\(ids.stderr)")
            let process = try await world.startServing(config: config, port: port)
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
            #expect(try await world.credentialState(port: port, user: oldSub) == "authorized")

            try write(accepted)  // the transfer was accepted
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
