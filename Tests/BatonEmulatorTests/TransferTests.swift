import BatonEmulator
import Foundation
import BatonJOSE
import Testing

@Suite("POST /auth/usermigrationinfo and the 60-day window")
struct TransferTests {
    static let day: Double = 86_400

    @Test("sender side gives one stable transfer_sub per user and target; recipient side exchanges it")
    func happyPath() async throws {
        try await Scenario.run(users: 4) { scenario in
            try scenario.emulator.initiateTransfer(clientID: scenario.clientID, toTeamID: scenario.recipient.teamID)
            let first = try await scenario.senderCall(sub: scenario.users[0].userIdentifier)
            #expect(first.status == 200)
            #expect(first.headers["cache-control"] == "no-store")
            let transferSub = try #require(first.json["transfer_sub"]?.stringValue)
            #expect(transferSub.split(separator: ".").map(\.count) == [6, 32, 4])
            let again = try await scenario.senderCall(sub: scenario.users[0].userIdentifier)
            #expect(again.json["transfer_sub"]?.stringValue == transferSub)
            let other = try await scenario.senderCall(sub: scenario.users[1].userIdentifier)
            #expect(other.json["transfer_sub"]?.stringValue != transferSub)

            // Before acceptance the recipient cannot exchange: the app is not theirs yet.
            #expect(try await scenario.recipientCall(transferSub: transferSub, token: "x").error == "invalid_client")

            try scenario.emulator.acceptTransfer(clientID: scenario.clientID)
            let reply = try await scenario.recipientCall(transferSub: transferSub)
            #expect(reply.status == 200)
            let newSub = try #require(reply.json["sub"]?.stringValue)
            #expect(newSub != scenario.users[0].userIdentifier)
            #expect(newSub.split(separator: ".").map(\.count) == [6, 32, 4])
            // users[0] hides their address: a relay address specific to the recipient team.
            #expect(scenario.users[0].isPrivateEmail)
            let email = try #require(reply.json["email"]?.stringValue)
            #expect(email.hasSuffix("@privaterelay.appleid.com") && email != scenario.users[0].email)
            #expect(reply.json["is_private_email"] == .bool(true))

            // users[1] shares their real address: no email member.
            let second = try await scenario.recipientCall(transferSub: try #require(other.json["transfer_sub"]?.stringValue))
            #expect(second.json["email"] == nil)
            #expect(second.json["is_private_email"] == .bool(false))

            // A device signing in now gets the new sub and the transfer_sub.
            let authorization = try scenario.emulator.authorize(clientID: scenario.clientID, user: scenario.users[0].userIdentifier, nonce: "n-1")
            let claims = try await scenario.verifiedClaims(authorization.idToken)
            #expect(claims["sub"]?.stringValue == newSub)
            #expect(claims["transfer_sub"]?.stringValue == transferSub)
            #expect(claims["email"]?.stringValue == email)
            #expect(claims["nonce"]?.stringValue == "n-1")
            #expect(authorization.userIdentifier == newSub)
        }
    }

    @Test("the sender keeps generating transfer identifiers after acceptance, within the window")
    func senderAfterAcceptance() async throws {
        try await Scenario.run(users: 2) { scenario in
            try scenario.emulator.initiateTransfer(clientID: scenario.clientID, toTeamID: scenario.recipient.teamID)
            try scenario.emulator.acceptTransfer(clientID: scenario.clientID)
            try scenario.emulator.advanceClock(by: 30 * TransferTests.day)
            #expect(try await scenario.senderCall(sub: scenario.users[1].userIdentifier).status == 200)
        }
    }

    @Test("sender-side errors")
    func senderErrors() async throws {
        try await Scenario.run(users: 2) { scenario in
            // No transfer initiated yet: the owner prepares its data, for any other team, never for itself.
            let early = try await scenario.senderCall(sub: scenario.users[0].userIdentifier)
            #expect(early.status == 200 && early.json["transfer_sub"]?.stringValue != nil, "\(early.text)")
            #expect(try await scenario.senderCall(sub: scenario.users[0].userIdentifier, target: scenario.sender.teamID).error == "invalid_request")
            #expect(try await scenario.senderCall(sub: scenario.users[0].userIdentifier, target: "CCCCCCCCCC").error == "invalid_request")
            try scenario.emulator.initiateTransfer(clientID: scenario.clientID, toTeamID: scenario.recipient.teamID)
            #expect(try await scenario.senderCall(sub: "000000.00000000000000000000000000000000.0000").error == "invalid_request")
            #expect(try await scenario.senderCall(sub: scenario.users[0].userIdentifier, target: "CCCCCCCCCC").error == "invalid_request")
            // The recipient team's credentials on the sender side: it does not own the app.
            #expect(try await scenario.senderCall(sub: scenario.users[0].userIdentifier, token: "x", team: scenario.recipient).error == "invalid_client")
            try scenario.emulator.revoke(clientID: scenario.clientID, userIdentifier: scenario.users[1].userIdentifier)
            #expect(try await scenario.senderCall(sub: scenario.users[1].userIdentifier).error == "invalid_request")
        }
    }

    @Test("recipient-side errors: wrong team, unknown identifier, revoked user")
    func recipientErrors() async throws {
        try await Scenario.run(users: 3) { scenario in
            let stranger = try scenario.emulator.createTeam("CCCCCCCCCC")
            let transferSubs = try await scenario.transferAll()
            let transferSub = try #require(transferSubs[scenario.users[0].userIdentifier])
            // The sender's team, or a third team, asking for the recipient's exchange.
            #expect(try await scenario.recipientCall(transferSub: transferSub, token: "x", team: scenario.sender).error == "invalid_grant")
            let strangerSecret = try clientSecret(team: stranger, clientID: scenario.clientID, now: scenario.emulator.now)
            let strangerReply = try await scenario.http.postForm("/auth/usermigrationinfo", [("transfer_sub", transferSub), ("client_id", scenario.clientID), ("client_secret", strangerSecret)], bearer: "x")
            #expect(strangerReply.error == "invalid_client")
            // A secret signed with another team's key while claiming the recipient team.
            let forged = try clientSecret(team: scenario.recipient, clientID: scenario.clientID, now: scenario.emulator.now, signingKeyPEM: scenario.sender.privateKeyPEM, kid: scenario.sender.keyID)
            let forgedReply = try await scenario.http.postForm("/auth/usermigrationinfo", [("transfer_sub", transferSub), ("client_id", scenario.clientID), ("client_secret", forged)], bearer: "x")
            #expect(forgedReply.error == "invalid_client")
            #expect(try await scenario.recipientCall(transferSub: "123456.0123456789abcdef0123456789abcdef.1234").error == "invalid_request")
            let revokedUser = scenario.users[2]
            try scenario.emulator.revoke(clientID: scenario.clientID, userIdentifier: revokedUser.userIdentifier)
            #expect(try await scenario.recipientCall(transferSub: try #require(transferSubs[revokedUser.userIdentifier])).error == "invalid_request")
        }
    }

    @Test("an app of another client ID that was never transferred is invalid_client")
    func appNotTransferred() async throws {
        try await Scenario.run(users: 1) { scenario in
            let transferSubs = try await scenario.transferAll()
            try scenario.emulator.createApp(clientID: "com.example.web", teamID: scenario.recipient.teamID)
            let secret = try clientSecret(team: scenario.recipient, clientID: "com.example.web", now: scenario.emulator.now)
            let token = try await scenario.http.accessToken(clientID: "com.example.web", secret: secret)
            let reply = try await scenario.http.postForm("/auth/usermigrationinfo", [
                ("transfer_sub", transferSubs.values.first!), ("client_id", "com.example.web"), ("client_secret", secret),
            ], bearer: token)
            #expect(reply.error == "invalid_client")
        }
    }

    @Test("access tokens: missing is invalid_request; expired or issued to someone else is invalid_grant")
    func accessTokens() async throws {
        try await Scenario.run(users: 1) { scenario in
            try scenario.emulator.initiateTransfer(clientID: scenario.clientID, toTeamID: scenario.recipient.teamID)
            let sub = scenario.users[0].userIdentifier
            let noBearer = try await scenario.http.postForm("/auth/usermigrationinfo", [("sub", sub), ("target", scenario.recipient.teamID), ("client_id", scenario.clientID), ("client_secret", try scenario.secret(scenario.sender))])
            #expect(noBearer.error == "invalid_request")
            #expect(try await scenario.senderCall(sub: sub, token: "a-made-up-token").error == "invalid_grant")

            // A token of the recipient team (for another app it owns) used by the sender.
            try scenario.emulator.createApp(clientID: "com.example.other", teamID: scenario.recipient.teamID)
            let otherToken = try await scenario.http.accessToken(clientID: "com.example.other", secret: try clientSecret(team: scenario.recipient, clientID: "com.example.other", now: scenario.emulator.now))
            #expect(try await scenario.senderCall(sub: sub, token: otherToken).error == "invalid_grant")

            let token = try await scenario.http.accessToken(clientID: scenario.clientID, secret: try scenario.secret(scenario.sender))
            #expect(try await scenario.senderCall(sub: sub, token: token).status == 200)
            try scenario.emulator.advanceClock(by: 3_601)
            #expect(try await scenario.senderCall(sub: sub, token: token).error == "invalid_grant")
        }
    }

    @Test("day 59 works, day 61 does not, and tokens lose transfer_sub")
    func sixtyDayBoundary() async throws {
        try await Scenario.run(users: 2) { scenario in
            let transferSubs = try await scenario.transferAll()
            let user = scenario.users[0]
            let transferSub = try #require(transferSubs[user.userIdentifier])

            try scenario.emulator.advanceClock(by: 59 * TransferTests.day)
            #expect(try await scenario.recipientCall(transferSub: transferSub).status == 200)
            let day59 = try await scenario.verifiedClaims(try scenario.emulator.authorize(clientID: scenario.clientID, user: user.id).idToken)
            #expect(day59["transfer_sub"]?.stringValue == transferSub)
            #expect(try await scenario.senderCall(sub: scenario.users[1].userIdentifier).status == 200)

            try scenario.emulator.advanceClock(by: 2 * TransferTests.day)
            let closed = try await scenario.recipientCall(transferSub: transferSub)
            #expect(closed.status == 400)
            #expect(closed.error == "invalid_request")
            // The sender no longer owns the app once the window has closed.
            #expect(try await scenario.senderCall(sub: scenario.users[1].userIdentifier, token: "x").error == "invalid_client")
            let day61 = try await scenario.verifiedClaims(try scenario.emulator.authorize(clientID: scenario.clientID, user: user.id).idToken)
            #expect(day61["transfer_sub"] == nil)
            #expect(day61["sub"] != nil)
        }
    }

    @Test("every user the sender knew gets transfer_sub in the window, generated or not: the sender's identifier")
    func everyUserGetsTransferSub() async throws {
        try await Scenario.run(users: 2) { scenario in
            // Generated before initiation for users[0]; never generated for users[1].
            let generated = try #require(try await scenario.senderCall(sub: scenario.users[0].userIdentifier).json["transfer_sub"]?.stringValue)
            try scenario.emulator.initiateTransfer(clientID: scenario.clientID, toTeamID: scenario.recipient.teamID)
            try scenario.emulator.acceptTransfer(clientID: scenario.clientID)
            let first = try await scenario.verifiedClaims(try scenario.emulator.authorize(clientID: scenario.clientID, user: scenario.users[0].id).idToken)
            #expect(first["transfer_sub"]?.stringValue == generated)
            let second = try await scenario.verifiedClaims(try scenario.emulator.authorize(clientID: scenario.clientID, user: scenario.users[1].id).idToken)
            let claimed = try #require(second["transfer_sub"]?.stringValue)
            // The sender asking afterwards gets the very identifier the token carried.
            #expect(try await scenario.senderCall(sub: scenario.users[1].userIdentifier).json["transfer_sub"]?.stringValue == claimed)
            #expect(try await scenario.recipientCall(transferSub: claimed).json["sub"] == second["sub"])
            // Someone who first signs in after the transfer was never the sender's user: no claim.
            let newcomer = try scenario.emulator.createUsers(clientID: scenario.clientID, count: 1)[0]
            let third = try await scenario.verifiedClaims(try scenario.emulator.authorize(clientID: scenario.clientID, user: newcomer.id).idToken)
            #expect(third["transfer_sub"] == nil)
            #expect(third["sub"]?.stringValue == newcomer.userIdentifier)
        }
    }

    @Test("the in-process shortcut generates the same identifiers as the endpoint")
    func shortcut() async throws {
        try await Scenario.run(users: 3) { scenario in
            try scenario.emulator.initiateTransfer(clientID: scenario.clientID, toTeamID: scenario.recipient.teamID)
            let viaHTTP = try await scenario.senderCall(sub: scenario.users[0].userIdentifier).json["transfer_sub"]?.stringValue
            let all = try scenario.emulator.transferIdentifiers(clientID: scenario.clientID)
            #expect(all.count == 3)
            #expect(all[scenario.users[0].userIdentifier] == viaHTTP)
        }
    }
}
