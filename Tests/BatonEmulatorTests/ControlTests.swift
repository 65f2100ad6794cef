@testable import BatonEmulator
import Foundation
import BatonJOSE
import Synchronization
import Testing
import TestSupport

@Suite("Scenario control")
struct ControlTests {
    @Test("teams: a PKCS#8 P-256 key usable by JOSE and openssl, 10-character IDs, errors")
    func teams() async throws {
        try await withEmulator { emulator in
            let http = EmulatorHTTP(emulator)
            let reply = try await http.postJSON("/emulator/teams", ["team_id": "TEAM000001"])
            #expect(reply.status == 201)
            #expect(reply.json["team_id"] == "TEAM000001")
            let keyID = try #require(reply.json["key_id"]?.stringValue)
            #expect(keyID.count == 10)
            let pem = try #require(reply.json["private_key_pem"]?.stringValue)
            #expect(pem.hasPrefix("-----BEGIN PRIVATE KEY-----"))
            _ = try P256PrivateKey(pkcs8PEM: pem)
            let directory = FileManager.default.temporaryDirectory.appendingPathComponent("emu-\(UUID().uuidString)")
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
            defer { try? FileManager.default.removeItem(at: directory) }
            try pem.write(to: directory.appendingPathComponent("key.p8"), atomically: true, encoding: .utf8)
            let text = try await offPool { try runProcess("/usr/bin/openssl", ["pkey", "-in", directory.appendingPathComponent("key.p8").path, "-noout", "-text"]) }
            #expect(text.status == 0)
            #expect(text.stdout.contains("prime256v1") || text.stdout.contains("P-256"))

            let generated = try await http.send("POST", "/emulator/teams")
            #expect(generated.status == 201)
            #expect(generated.json["team_id"]?.stringValue?.count == 10)
            #expect(try await http.postJSON("/emulator/teams", ["team_id": "TEAM000001"]).status == 409)
            #expect(try await http.postJSON("/emulator/teams", ["team_id": "lowercase1"]).error == "bad_input")
        }
    }

    @Test("apps and users: identifiers shaped like Apple's, different per team for the same person")
    func appsAndUsers() async throws {
        try await withEmulator { emulator in
            let http = EmulatorHTTP(emulator)
            try emulator.createTeam("AAAAAAAAAA")
            try emulator.createTeam("BBBBBBBBBB")
            #expect(try await http.postJSON("/emulator/apps", ["client_id": "com.a", "team_id": "AAAAAAAAAA"]).status == 201)
            #expect(try await http.postJSON("/emulator/apps", ["client_id": "com.a", "team_id": "AAAAAAAAAA"]).status == 409)
            #expect(try await http.postJSON("/emulator/apps", ["client_id": "com.b", "team_id": "ZZZZZZZZZZ"]).error == "unknown_team")
            #expect(try await http.postJSON("/emulator/apps", ["client_id": "com.b", "team_id": "BBBBBBBBBB"]).status == 201)

            let reply = try await http.postJSON("/emulator/users", ["client_id": "com.a", "count": 3])
            #expect(reply.status == 201)
            let users = try #require(reply.json["users"]?.arrayValue)
            #expect(users.count == 3)
            for user in users {
                let identifier = try #require(user["user_identifier"]?.stringValue)
                let parts = identifier.split(separator: ".")
                #expect(parts.map(\.count) == [6, 32, 4])
                #expect(parts[0].allSatisfy(\.isNumber) && parts[2].allSatisfy(\.isNumber) && parts[1].allSatisfy(\.isHexDigit))
                #expect(user["id"]?.stringValue?.hasPrefix("person-") == true)
                #expect(user["is_private_email"]?.boolValue != nil)
            }
            #expect(users[0]["is_private_email"] == .bool(true) && users[0]["email"]?.stringValue?.hasSuffix("@privaterelay.appleid.com") == true)
            #expect(users[1]["is_private_email"] == .bool(false))
            // The same person signing in to team B's app gets another identifier and another relay address.
            let personID = try #require(users[0]["id"]?.stringValue)
            let underB = try emulator.authorize(clientID: "com.b", user: personID)
            #expect(underB.userIdentifier != users[0]["user_identifier"]?.stringValue)
            let claims = try CompactJWS.parse(underB.idToken).claims()
            #expect(claims["email"]?.stringValue != users[0]["email"]?.stringValue)

            #expect(try await http.postJSON("/emulator/users", ["client_id": "com.none", "count": 1]).error == "unknown_app")
            #expect(try await http.postJSON("/emulator/users", ["client_id": "com.a", "count": 0]).error == "bad_input")
            let allPublic = try emulator.createUsers(clientID: "com.a", count: 2, privateEmail: false)
            #expect(allPublic.allSatisfy { !$0.isPrivateEmail && $0.email.hasSuffix("@example.com") })

            // A rehearsal seeds the team's real subjects: each person is known to the owner by the given identifier.
            let given = ["001234.0123456789abcdef0123456789abcdef.0001", "001234.fedcba9876543210fedcba9876543210.0002"]
            let seeded = try emulator.createUsers(clientID: "com.a", userIdentifiers: given)
            #expect(seeded.map(\.userIdentifier) == given)
            #expect(try emulator.authorize(clientID: "com.a", user: seeded[1].id).userIdentifier == given[1])
            #expect(throws: EmulatorError.self) { try emulator.createUsers(clientID: "com.a", userIdentifiers: [given[0]]) }
            #expect(throws: EmulatorError.self) { try emulator.createUsers(clientID: "com.a", userIdentifiers: ["x", "x"]) }

            // A recipient's rehearsal seeds transfer identifiers: the person's identity token after the transfer
            // carries the given one (a fresh identifier under the owner where none is given).
            let b = try emulator.createTeam()
            let transfer = "000777.00000000000000000000000000000abc.0777"
            let recipientRow = try emulator.createUsers(clientID: "com.a", userIdentifiers: [nil, given[0] + "x"], transferIdentifiers: [transfer, nil],
                                                        toTeamID: b.teamID)
            #expect(recipientRow[0].userIdentifier != transfer && recipientRow[1].userIdentifier == given[0] + "x")
            #expect(throws: EmulatorError.self) {
                try emulator.createUsers(clientID: "com.a", userIdentifiers: [nil], transferIdentifiers: [transfer], toTeamID: b.teamID)
            }
            #expect(throws: EmulatorError.self) { try emulator.createUsers(clientID: "com.a", userIdentifiers: [nil], transferIdentifiers: ["t2"]) }
            try emulator.initiateTransfer(clientID: "com.a", toTeamID: b.teamID)
            _ = try emulator.acceptTransfer(clientID: "com.a")
            let token = try emulator.authorize(clientID: "com.a", user: recipientRow[0].id).idToken
            #expect(try CompactJWS.parse(token).claims()["transfer_sub"]?.stringValue == transfer)
        }
    }

    @Test("transfers: initiate and accept over HTTP, with their errors")
    func transfers() async throws {
        try await Scenario.run(users: 1) { scenario in
            let http = scenario.http
            #expect(try await http.postJSON("/emulator/transfers/accept", ["client_id": .string(scenario.clientID)]).status == 409)
            #expect(try await http.postJSON("/emulator/transfers", ["client_id": .string(scenario.clientID), "to_team_id": "AAAAAAAAAA"]).status == 409)
            #expect(try await http.postJSON("/emulator/transfers", ["client_id": .string(scenario.clientID), "to_team_id": "ZZZZZZZZZZ"]).error == "unknown_team")
            let initiated = try await http.postJSON("/emulator/transfers", ["client_id": .string(scenario.clientID), "to_team_id": "BBBBBBBBBB"])
            #expect(initiated.status == 201)
            #expect(try await http.postJSON("/emulator/transfers", ["client_id": .string(scenario.clientID), "to_team_id": "BBBBBBBBBB"]).status == 409)
            let before = scenario.emulator.now.timeIntervalSince1970.rounded(.down)
            let accepted = try await http.postJSON("/emulator/transfers/accept", ["client_id": .string(scenario.clientID)])
            let after = scenario.emulator.now.timeIntervalSince1970
            #expect(accepted.status == 200)
            #expect(accepted.json["state"] == "accepted")
            // accepted_at in the form Baton's apple.transfer.accepted_at takes, the same second as accepted_at_unix.
            let iso = try #require(accepted.json["accepted_at"]?.stringValue, "\(accepted.text)")
            #expect(iso.wholeMatch(of: /\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ/) != nil, "\(iso)")
            let acceptedAt = try Date(iso, strategy: .iso8601).timeIntervalSince1970
            #expect(accepted.json["accepted_at_unix"]?.intValue == Int64(acceptedAt))
            #expect(acceptedAt >= before && acceptedAt <= after)
            // The recipient now owns the app: a device's token carries its identifier.
            let claims = try await scenario.verifiedClaims(try scenario.emulator.authorize(clientID: scenario.clientID, user: scenario.users[0].id).idToken)
            #expect(claims["sub"]?.stringValue != scenario.users[0].userIdentifier)
        }
    }

    @Test("clock: advance, set by Unix time or ISO 8601, and errors")
    func clock() async throws {
        try await withEmulator { emulator in
            let http = EmulatorHTTP(emulator)
            let before = emulator.now
            let advanced = try await http.postJSON("/emulator/clock", ["advance_seconds": 86_400])
            let after = emulator.now
            #expect(advanced.status == 200)
            let now = Double(try #require(advanced.json["now"]?.intValue))
            #expect(now >= (before.timeIntervalSince1970 + 86_400).rounded(.down))
            #expect(now <= after.timeIntervalSince1970)
            #expect(after.timeIntervalSince(Date()) > 86_000)
            let set = try await http.postJSON("/emulator/clock", ["now": 2_000_000_000])
            #expect(set.json["now"]?.intValue == 2_000_000_000)
            let iso = try await http.postJSON("/emulator/clock", ["now": "2030-01-01T00:00:00Z"])
            #expect(iso.json["now"]?.intValue == 1_893_456_000)
            #expect(emulator.now.timeIntervalSince1970 >= 1_893_456_000)
            #expect(emulator.now.timeIntervalSince1970 < 1_893_456_000 + 600)
            #expect(try await http.get("/emulator/clock").json["now"]?.intValue != nil)
            #expect(try await http.postJSON("/emulator/clock", ["now": "yesterday"]).error == "bad_input")
            #expect(try await http.postJSON("/emulator/clock", [:]).error == "bad_input")
        }
    }

    @Test("key rotation: the new key signs, old keys stay published for two more rotations")
    func rotation() async throws {
        try await Scenario.run(users: 1) { scenario in
            let original = scenario.emulator.jwks.keys.compactMap(\.kid)
            #expect(original.count == 2)
            let oldToken = try scenario.emulator.authorize(clientID: scenario.clientID, user: scenario.users[0].id).idToken
            let reply = try await scenario.http.send("POST", "/emulator/rotate-keys")
            #expect(reply.status == 200)
            let newKID = try #require(reply.json["kid"]?.stringValue)
            #expect(!original.contains(newKID))
            let published = try JWKSet(json: Array(try await scenario.http.get("/auth/keys").text.utf8)).keys.compactMap(\.kid)
            #expect(published.first == newKID)
            #expect(Set(published) == Set(original + [newKID]))
            let newToken = try scenario.emulator.authorize(clientID: scenario.clientID, user: scenario.users[0].id).idToken
            #expect(try CompactJWS.parse(newToken).header.kid == newKID)
            // A token signed before the rotation still verifies.
            _ = try await scenario.verifiedClaims(oldToken)
            _ = try await scenario.verifiedClaims(newToken)
            try await scenario.emulator.rotateKeys()
            try await scenario.emulator.rotateKeys()
            let later = scenario.emulator.jwks.keys.compactMap(\.kid)
            #expect(later.count == 3)
            #expect(later.contains(newKID))
            #expect(!later.contains(where: original.contains))
        }
    }

    @Test("faults: 429 with Retry-After over the rate, injected 5xx, and the stats count them")
    func faultsAndStats() async throws {
        try await Scenario.run(users: 1) { scenario in
            let http = scenario.http
            // One request per 1,000 s: the bucket starts nearly empty, so every request here is over the rate.
            let set = try await http.postJSON("/emulator/faults", ["rate_limit_per_s": 0.001])
            #expect(set.status == 200)
            var statuses: [Int] = []
            var retryAfter: [Int] = []
            for _ in 0..<5 {
                let reply = try await http.get("/auth/keys")
                statuses.append(reply.status)
                retryAfter.append(Int(reply.headers["retry-after"] ?? "") ?? 0)
                #expect(reply.error == "rate_limited")
            }
            #expect(statuses == [429, 429, 429, 429, 429])
            #expect(retryAfter.allSatisfy { $0 > 900 && $0 <= 999 })
            // Scenario control is never rate limited.
            #expect(try await http.get("/emulator/clock").status == 200)

            #expect(try await http.postJSON("/emulator/faults", ["error_rate": 1, "error_status": 502]).status == 200)
            #expect(try await http.get("/emulator/faults").json["error_status"]?.intValue == 502)
            let failed = try await http.get("/auth/keys")
            #expect(failed.status == 502)
            try scenario.emulator.setFaults(EmulatorFaults(latencyMilliseconds: 20))
            #expect(try await http.get("/auth/keys").status == 200)
            #expect(try await http.postJSON("/emulator/faults", ["error_rate": 2]).error == "bad_input")
            #expect(try await http.postJSON("/emulator/faults", ["error_status": 404]).error == "bad_input")

            let stats = try await http.get("/emulator/stats")
            let keys = try #require(stats.json["endpoints"]?["/auth/keys"])
            #expect(keys["calls"]?.intValue == 7)
            #expect(keys["rate_limited"]?.intValue == 5)
            #expect(keys["statuses"]?["429"]?.intValue == 5)
            #expect(keys["statuses"]?["502"]?.intValue == 1)
            #expect(keys["statuses"]?["200"]?.intValue == 1)
            #expect(keys["errors"]?["rate_limited"]?.intValue == 5)
            let inProcess = scenario.emulator.stats()
            #expect(inProcess["/auth/keys"].calls == 7)
            #expect(inProcess["/emulator/faults"].statuses["400"] == 2)
            #expect(inProcess["/emulator/faults"].errors["bad_input"] == 2)
            #expect(try await http.send("POST", "/emulator/stats/reset").status == 200)
            #expect(scenario.emulator.stats()["/auth/keys"].calls == 0)
        }
    }

    @Test("errors are counted by code and status: Apple's answered 400 {\"error\"} not cached, a control endpoint's with its code's status")
    func errorStats() async throws {
        try await Scenario.run(users: 1) { scenario in
            let apple = try await scenario.http.postForm("/auth/token", [("grant_type", "password")])
            #expect(apple.status == 400 && apple.json == ["error": "unsupported_grant_type"])
            #expect(apple.headers["cache-control"] == "no-store" && apple.headers["pragma"] == "no-cache")
            #expect(scenario.emulator.stats()["/auth/token"].errors["unsupported_grant_type"] == 1)
            #expect(scenario.emulator.stats()["/auth/token"].statuses["400"] == 1)
            let control = try await scenario.http.postJSON("/emulator/users", ["client_id": "com.example.none", "count": 1])
            #expect(control.status == 404 && control.json == ["error": "unknown_app", "reason": "com.example.none"])
            #expect(scenario.emulator.stats()["/emulator/users"].errors["unknown_app"] == 1)
            #expect(scenario.emulator.stats()["/emulator/users"].statuses["404"] == 1)
        }
    }

    @Test("state is saved and loaded: teams, keys, apps, people, transfers and the clock survive a restart")
    func stateFile() async throws {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("emulator-\(UUID().uuidString).json").path
        defer { try? FileManager.default.removeItem(atPath: path) }
        let first = try await AppleEmulator.start(statePath: path)
        let team = try first.createTeam("AAAAAAAAAA")
        try first.createTeam("BBBBBBBBBB")
        try first.createApp(clientID: "com.example.app", teamID: "AAAAAAAAAA")
        let users = try first.createUsers(clientID: "com.example.app", count: 2)
        try first.initiateTransfer(clientID: "com.example.app", toTeamID: "BBBBBBBBBB")
        let transferSubs = try first.transferIdentifiers(clientID: "com.example.app")
        try first.acceptTransfer(clientID: "com.example.app")
        try first.advanceClock(by: 10 * 86_400)
        let kids = first.jwks.keys.compactMap(\.kid)
        await first.stop()
        let permissions = try FileManager.default.attributesOfItem(atPath: path)[.posixPermissions] as? Int
        #expect(permissions == 0o600)

        try await withEmulator(statePath: path) { second in
            #expect(second.jwks.keys.compactMap(\.kid) == kids)
            #expect(abs(second.now.timeIntervalSinceNow - 10 * 86_400) < 60)
            #expect(second.credentialState(clientID: "com.example.app", userIdentifier: users[0].userIdentifier) == .transferred)
            let claims = try CompactJWS.parse(try second.authorize(clientID: "com.example.app", user: users[0].id).idToken).claims()
            #expect(claims["transfer_sub"]?.stringValue == transferSubs[users[0].userIdentifier])
            // The team's key still authenticates after the restart.
            let secret = try clientSecret(team: team, clientID: "com.example.app", now: second.now)
            let reply = try await EmulatorHTTP(second).postForm("/auth/token", [("grant_type", "client_credentials"), ("scope", "user.migration"), ("client_id", "com.example.app"), ("client_secret", secret)])
            #expect(reply.status == 200)
            #expect(throws: EmulatorError(.conflict)) { try second.createTeam("AAAAAAAAAA") }
        }
    }

    @Test("a corrupt state file is refused")
    func corruptState() async throws {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("emulator-\(UUID().uuidString).json").path
        defer { try? FileManager.default.removeItem(atPath: path) }
        try "{not json".write(toFile: path, atomically: true, encoding: .utf8)
        await #expect(throws: EmulatorError(.stateFile)) { try await AppleEmulator.start(statePath: path) }
    }
}

@Suite("Rate limiter")
struct RateLimiterTests {
    /// A clock the test moves by hand.
    final class ManualClock: Sendable {
        private let value = Mutex(1_000.0)
        func advance(_ seconds: Double) { value.withLock { $0 += seconds } }
        var read: @Sendable () -> Double { { [self] in value.withLock { $0 } } }
    }

    @Test("the bucket starts with one second's worth, refills at the rate, and holds max(1, rate)")
    func bucket() {
        let clock = ManualClock()
        let injector = FaultInjector(seconds: clock.read)
        injector.set(EmulatorFaults(rateLimitPerSecond: 2))
        #expect(injector.admit() == nil)
        #expect(injector.admit() == nil)
        #expect(injector.admit() == 1)
        clock.advance(0.5)
        #expect(injector.admit() == nil)
        #expect(injector.admit() == 1)
        clock.advance(60)
        #expect((0..<3).map { _ in injector.admit() } == [nil, nil, 1])
    }

    @Test("under 1/s the first request waits, and waiting the Retry-After is enough")
    func slowRate() {
        let clock = ManualClock()
        let injector = FaultInjector(seconds: clock.read)
        injector.set(EmulatorFaults(rateLimitPerSecond: 0.01))
        #expect(injector.admit() == 99)
        clock.advance(99)
        #expect(injector.admit() == nil)
        #expect(injector.admit() == 100)
        injector.set(EmulatorFaults())
        #expect(injector.admit() == nil)
    }
}
