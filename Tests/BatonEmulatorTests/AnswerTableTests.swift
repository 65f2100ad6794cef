import BatonEmulator
import Foundation
import BatonJOSE
import Testing

/// One row of the table "Apple's answers by side, stage and case" in docs/troubleshooting.md.
struct AnswerRow: CustomStringConvertible {
    var side: String
    var stage: String
    /// A period of the transfer, or another case (which then happens in the window).
    var period: String
    var answer: String
    var description: String { "\(side) | \(stage) | \(period) → \(answer)" }

    /// The rows of the table, read from the document.
    static func load() throws -> [AnswerRow] {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        let text = try String(contentsOf: root.appendingPathComponent("docs/troubleshooting.md"), encoding: .utf8)
        guard let start = text.range(of: "## Apple's answers by side, stage and case") else {
            throw HelperError("docs/troubleshooting.md has no section \"Apple's answers by side, stage and case\"")
        }
        var rows: [AnswerRow] = []
        var inTable = false
        for line in text[start.upperBound...].split(separator: "\n", omittingEmptySubsequences: false) {
            guard line.hasPrefix("|") else {
                if inTable { break }
                continue
            }
            inTable = true
            let cells = line.split(separator: "|", omittingEmptySubsequences: false).dropFirst().dropLast()
                .map { $0.trimmingCharacters(in: .whitespaces) }
            guard cells.count == 5, cells[0] != "side", !cells[0].hasPrefix("---") else { continue }
            rows.append(AnswerRow(side: cells[0], stage: cells[1], period: cells[2], answer: cells[3]))
        }
        return rows
    }
}

@Suite("The table of Apple's answers in docs/troubleshooting.md, replayed against the emulator")
struct AnswerTableTests {
    static let window: Double = 60 * 86_400

    @Test("the table covers every side, stage and period, and every error code of Apple's endpoints")
    func coverage() throws {
        let rows = try AnswerRow.load()
        let periods = ["before initiation", "initiated", "day 0 to 60", "after day 60"]
        for (side, stages) in [("sender", ["token", "migration"]), ("recipient", ["token", "migration"]), ("user", ["identity token"])] {
            for stage in stages {
                for period in periods {
                    #expect(rows.contains { $0.side == side && $0.stage == stage && $0.period == period }, "no row for \(side) | \(stage) | \(period)")
                }
            }
        }
        let codes = Set(rows.compactMap { row in row.answer.split(separator: "`").dropFirst().first.map(String.init) })
        // Every error code the emulator's Apple endpoints answer appears in the table.
        for code in EmulatorError.Code.allCases.map(\.rawValue).filter({ !["unknown_team", "unknown_app", "unknown_user", "conflict", "bad_input", "state_file"].contains($0) })
            + ["rate_limited", "server_error"] {
            #expect(codes.contains(code), "no row answers \(code)")
        }
    }

    @Test("every row is what the emulator answers over HTTP")
    func everyRow() async throws {
        for row in try AnswerRow.load() {
            try await Scenario.run(users: 1) { scenario in
                do {
                    let observed = try await observe(row, scenario)
                    #expect(observed == row.answer, "\(row): the emulator answers \(observed)")
                } catch {
                    Issue.record("\(row): \(error)")
                }
            }
        }
    }

    /// Brings the scenario to the row's period and makes the row's call; returns the answer in the table's words.
    private func observe(_ row: AnswerRow, _ scenario: Scenario) async throws -> String {
        let emulator = scenario.emulator, clientID = scenario.clientID, user = scenario.users[0]
        // A transfer identifier made before initiation, so the recipient has one to exchange in every period.
        let transferSub = try #require(try await scenario.senderCall(sub: user.userIdentifier).json["transfer_sub"]?.stringValue)
        let team = row.side == "recipient" ? scenario.recipient : scenario.sender
        var signingKey: TeamCredentials?
        var bearer: String?
        switch row.period {
        case "before initiation":
            break
        case "initiated":
            try emulator.initiateTransfer(clientID: clientID, toTeamID: scenario.recipient.teamID)
        case "day 0 to 60", "after day 60", "access token of the other team":
            try emulator.initiateTransfer(clientID: clientID, toTeamID: scenario.recipient.teamID)
            let accepted = try emulator.acceptTransfer(clientID: clientID)
            // Both sides' access tokens are taken inside the window (they live an hour), so the migration stage
            // after day 60 is Apple's answer to the call itself, not to a missing token.
            try emulator.setClock(to: accepted.addingTimeInterval(AnswerTableTests.window - 1_800))
            if row.stage == "migration" {
                let tokenTeam = row.period == "access token of the other team" ? scenario.sender : team
                bearer = try await scenario.http.accessToken(clientID: clientID, secret: try scenario.secret(tokenTeam))
            }
            let offset: Double = row.period == "after day 60" ? 60 : -10
            try emulator.setClock(to: accepted.addingTimeInterval(AnswerTableTests.window + offset))
        case "unknown `sub`", "target other than the transfer's recipient", "user revoked", "unknown `transfer_sub`", "no access token",
             "expired access token", "scope other than `user.migration`", "`grant_type` other than `client_credentials`",
             "expired client secret", "over the rate limit", "Apple failing":
            try emulator.initiateTransfer(clientID: clientID, toTeamID: scenario.recipient.teamID)
            try emulator.acceptTransfer(clientID: clientID)
            try emulator.advanceClock(by: 86_400)
        case "key of the other team":
            if row.side == "recipient" {
                try emulator.initiateTransfer(clientID: clientID, toTeamID: scenario.recipient.teamID)
                try emulator.acceptTransfer(clientID: clientID)
            }
            signingKey = row.side == "recipient" ? scenario.sender : scenario.recipient
        default:
            throw HelperError("unknown period '\(row.period)'")
        }

        let secretIssued = row.period == "expired client secret" ? emulator.now.addingTimeInterval(-2 * 86_400) : emulator.now
        let secret = try clientSecret(team: team, clientID: clientID, now: secretIssued,
                                      signingKeyPEM: signingKey?.privateKeyPEM, kid: signingKey?.keyID)
        var sub = user.userIdentifier, target = scenario.recipient.teamID, exchanged = transferSub
        switch row.period {
        case "unknown `sub`": sub = "000000.00000000000000000000000000000000.0000"
        case "target other than the transfer's recipient": target = try emulator.createTeam("CCCCCCCCCC").teamID
        case "user revoked": try emulator.revoke(clientID: clientID, userIdentifier: user.userIdentifier)
        case "unknown `transfer_sub`": exchanged = "123456.0123456789abcdef0123456789abcdef.1234"
        case "expired access token":
            bearer = try await scenario.http.accessToken(clientID: clientID, secret: secret)
            try emulator.advanceClock(by: 3_601)
        case "over the rate limit": try emulator.setFaults(EmulatorFaults(rateLimitPerSecond: 0.01))
        case "Apple failing": try emulator.setFaults(EmulatorFaults(errorRate: 1, errorStatus: 503))
        default: break
        }
        let reply: Reply
        switch row.stage {
        case "token":
            let scope = row.period == "scope other than `user.migration`" ? "openid" : "user.migration"
            let grant = row.period == "`grant_type` other than `client_credentials`" ? "password" : "client_credentials"
            reply = try await scenario.http.postForm("/auth/token", [("grant_type", grant), ("scope", scope),
                                                                     ("client_id", clientID), ("client_secret", secret)])
            return describe(reply, success: reply.json["access_token"]?.stringValue != nil ? "200" : "200 without access_token")
        case "migration":
            let fields = row.side == "sender" ? [("sub", sub), ("target", target)] : [("transfer_sub", exchanged)]
            // Outside the window, a team that cannot get a token of its own calls with a made-up one: Apple
            // refuses the team before it looks at the token.
            if bearer == nil { bearer = try? await scenario.http.accessToken(clientID: clientID, secret: secret) }
            reply = try await scenario.http.postForm("/auth/usermigrationinfo", fields + [("client_id", clientID), ("client_secret", secret)],
                                                     bearer: row.period == "no access token" ? nil : bearer ?? "made-up-token")
            let member = row.side == "sender" ? "transfer_sub" : "sub"
            if row.side == "sender", reply.status == 200, reply.json["transfer_sub"]?.stringValue != transferSub {
                return "200 with another transfer_sub than before initiation"
            }
            return describe(reply, success: reply.json[member]?.stringValue != nil ? "200 `\(member)`" : "200 without \(member)")
        case "identity token":
            let signIn = try await scenario.http.postJSON("/emulator/authorize", ["client_id": .string(clientID), "user": .string(user.id)])
            let claims = try await scenario.verifiedClaims(try #require(signIn.json["id_token"]?.stringValue, "\(signIn.text)"))
            switch claims["transfer_sub"]?.stringValue {
            case nil: return "no `transfer_sub`"
            case transferSub: return "`transfer_sub`"
            default: return "a `transfer_sub` other than the sender's"
            }
        default:
            throw HelperError("unknown stage '\(row.stage)'")
        }
    }

    private func describe(_ reply: Reply, success: String) -> String {
        if reply.status == 200 { return success }
        return "\(reply.status) `\(reply.error ?? "no error member")`"
    }
}
