import BatonJOSE
import Foundation

/// The rehearsal's devices: what the app does on a device after the transfer, as `baton demo`'s devices do,
/// over ``LoopbackHTTP``. A device of a user Baton knows by the sender's subject first asks Baton for the
/// credential state (`transferred` expected); then it re-authorizes silently at the emulator
/// (`POST /emulator/authorize`: a token with the new `sub` and `transfer_sub`) and signs in to Baton
/// (`POST /v1/signin`: `migrated` expected, `current` for a second device of a user already migrated).
struct RehearsalDevices: Sendable {
    /// Baton's service.
    let service: LoopbackHTTP
    /// The emulator.
    let apple: LoopbackHTTP
    /// The transferred app's client ID.
    let clientID: String
    /// Devices in flight at once.
    let concurrency: Int

    /// Runs one device per entry (`user` is an identifier the emulator knows; `asksCredentialState` whether Baton
    /// knows it too), `concurrency` at a time, writing a progress line every `logInterval` seconds; returns the
    /// devices that did not end in `migrated` or `current`.
    func run(_ devices: [(user: String, asksCredentialState: Bool)], logInterval: Double = 10,
             write: @Sendable (String) -> Void = { FileHandle.standardError.write(Data($0.utf8)) }) async -> Int {
        var failures = 0
        var done = 0
        let start = ContinuousClock.now
        var lastLog = start
        await withTaskGroup(of: Bool.self) { group in
            var next = 0
            while next < min(concurrency, devices.count) {
                let device = devices[next]
                group.addTask { await self.device(device.user, asksCredentialState: device.asksCredentialState) }
                next += 1
            }
            for await succeeded in group {
                if !succeeded { failures += 1 }
                done += 1
                let now = ContinuousClock.now
                if now - lastLog >= .seconds(logInterval) {
                    lastLog = now
                    let seconds = Double((now - start).components.seconds) + Double((now - start).components.attoseconds) / 1e18
                    write("devices done=\(done) total=\(devices.count) rate_per_s=\(String(format: "%.1f", Double(done) / seconds)) failed=\(failures)\n")
                }
                if next < devices.count {
                    let device = devices[next]
                    group.addTask { await self.device(device.user, asksCredentialState: device.asksCredentialState) }
                    next += 1
                }
            }
        }
        return failures
    }

    private func device(_ user: String, asksCredentialState: Bool) async -> Bool {
        do {
            if asksCredentialState {
                let query = user.addingPercentEncoding(withAllowedCharacters: .alphanumerics.union(CharacterSet(charactersIn: "._-"))) ?? user
                let state = try await service.send("GET", "/v1/credential-state?user=\(query)")
                guard state.status == 200, try JSON.parseObject(state.body)["state"]?.stringValue == "transferred" else { return false }
            }
            let authorization = try await apple.send("POST", "/emulator/authorize", headers: [("Content-Type", "application/json")],
                                                     body: JSON.serializeBytes(.object(["client_id": .string(clientID), "user": .string(user)])))
            guard authorization.status == 200, let token = try JSON.parseObject(authorization.body)["id_token"]?.stringValue else { return false }
            let signIn = try await service.send("POST", "/v1/signin", headers: [("Content-Type", "application/json")],
                                                body: JSON.serializeBytes(.object(["id_token": .string(token)])))
            guard signIn.status == 200 else { return false }
            let outcome = try JSON.parseObject(signIn.body)["outcome"]?.stringValue
            return outcome == "migrated" || outcome == "current"
        } catch {
            return false
        }
    }
}
