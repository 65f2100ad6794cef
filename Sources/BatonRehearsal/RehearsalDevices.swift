import BatonEmulator
import BatonJSON
import Foundation

/// The rehearsal's devices: what the app does on a device after the transfer, as `baton demo`'s devices do.
/// A web or Android client of a user Baton knows by the sender's subject first asks Baton for the credential state
/// (`GET /v1/credential-state` over ``LoopbackHTTP``: `transferred` expected); then each device re-authorizes silently
/// with Apple (`authorize`: the in-process emulator signs a token with the new `sub` and `transfer_sub`) and
/// signs in to Baton (`POST /v1/signin` over ``LoopbackHTTP``: `migrated` expected, `current` for a second
/// device of a user already migrated).
///
/// The device's step at Apple is a call into the emulator, not an HTTP request: on a phone it is
/// `ASAuthorizationController` talking to Apple, nothing of Baton's, and over loopback it cost a third of the
/// devices' requests with their thread hand-offs. Baton's two requests go over HTTP as an app's would.
struct RehearsalDevices: Sendable {
    /// Baton's service.
    let service: LoopbackHTTP
    /// Apple's side of a device's sign-in: the identity token for `user` (an identifier the emulator knows).
    let authorize: @Sendable (_ user: String) throws -> String
    /// Devices in flight at once.
    let concurrency: Int

    /// Runs one device per entry of the batches `next` returns until an empty one (`user` is an identifier the
    /// emulator knows; `asksCredentialState` whether the device asks Baton for its credential state first: a web or
    /// Android client of a user Baton knows), `concurrency` at a time, writing a progress line (of `total`) every
    /// `logInterval` seconds; returns the devices that did not end in `migrated` or `current`, counted by the step
    /// and answer that stopped them (`signin unmatched`, `credential-state http 503`, `authorize no response`, …).
    /// A batch is asked for when the one before has been started, so only one is held at a time.
    func run(total: Int, logInterval: Double = 10, write: @Sendable (String) -> Void = { FileHandle.standardError.write(Data($0.utf8)) },
             next: () async throws -> [(user: String, asksCredentialState: Bool)]) async throws -> [String: Int] {
        var failures: [String: Int] = [:]
        var done = 0
        let start = ContinuousClock.now
        var lastLog = start
        try await withThrowingTaskGroup(of: String?.self) { group in
            var batch = try await next()[...]
            var inFlight = 0
            func startNext() async throws {
                if batch.isEmpty { batch = try await next()[...] }
                guard let device = batch.popFirst() else { return }
                group.addTask { await self.device(device.user, asksCredentialState: device.asksCredentialState) }
                inFlight += 1
            }
            while inFlight < concurrency, !batch.isEmpty { try await startNext() }
            while let failure = try await group.next() {
                inFlight -= 1
                if let failure { failures[failure, default: 0] += 1 }
                done += 1
                let now = ContinuousClock.now
                if now - lastLog >= .seconds(logInterval) {
                    lastLog = now
                    let seconds = Double((now - start).components.seconds) + Double((now - start).components.attoseconds) / 1e18
                    write("devices done=\(done) total=\(total) rate_per_s=\(String(format: "%.1f", Double(done) / seconds)) failed=\(failures.values.reduce(0, +))\n")
                }
                try await startNext()
            }
        }
        return failures
    }

    /// One device; nil when it ended signed in, else the step and what stopped it.
    private func device(_ user: String, asksCredentialState: Bool) async -> String? {
        func answer(_ step: String, _ result: (status: Int, body: [UInt8]), _ key: String) -> String {
            guard result.status == 200 else { return "\(step) http \(result.status)" }
            return (try? JSON.parseObject(result.body)[key]?.stringValue).flatMap { $0 } ?? "\(step) malformed"
        }
        var step = "credential-state"
        do {
            if asksCredentialState {
                let query = user.addingPercentEncoding(withAllowedCharacters: .alphanumerics.union(CharacterSet(charactersIn: "._-"))) ?? user
                let state = answer(step, try await service.send("GET", "/v1/credential-state?user=\(query)"), "state")
                guard state == "transferred" else { return state.hasPrefix(step) ? state : "\(step) \(state)" }
            }
            step = "authorize"
            let token: String
            do {
                token = try authorize(user)
            } catch {
                return "\(step) \((error as? EmulatorError)?.code.rawValue ?? "failed")"
            }
            step = "signin"
            let outcome = answer(step, try await service.send("POST", "/v1/signin", headers: [("Content-Type", "application/json")],
                                                              body: JSON.serializeBytes(.object(["id_token": .string(token)]))), "outcome")
            guard outcome != "migrated", outcome != "current" else { return nil }
            return outcome.hasPrefix(step) ? outcome : "\(step) \(outcome)"
        } catch {
            return "\(step) no response"
        }
    }
}
