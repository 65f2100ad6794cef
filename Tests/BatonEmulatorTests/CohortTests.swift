@testable import BatonEmulator
import BatonAppleSignIn
import Foundation
import BatonJOSE
import Testing

@Suite("Cohort: a rehearsal's users, derived")
struct CohortTests {
    @Test("the permutation is deterministic, Apple-shaped, collision-free and inverts")
    func permutation() throws {
        let permutation = ShapedPermutation(key: 0x1234_5678_9ABC_DEF0)
        let other = ShapedPermutation(key: 42)
        var seen = Set<String>()
        for index in 0..<20_000 {
            // Neighbouring inputs (one digit apart) as a table's generated subjects are.
            let text = String(format: "%06d.%032x.%04d", index % 1_000_000, index, index % 10_000)
            let identifier = try #require(ShapedIdentifier(text))
            #expect(identifier.description == text)
            let permuted = permutation.apply(identifier)
            #expect(ShapedIdentifier(permuted.description) == permuted)
            #expect(permutation.invert(permuted) == identifier)
            #expect(permuted != identifier && permuted == permutation.apply(identifier) && permuted != other.apply(identifier))
            seen.insert(permuted.description)
        }
        #expect(seen.count == 20_000)
        for malformed in ["", "001234.0123456789ABCDEF0123456789abcdef.0001", "01234.0123456789abcdef0123456789abcdef.0001",
                          "001234-0123456789abcdef0123456789abcdef.0001", "001234.0123456789abcdef0123456789abcdeg.0001"] {
            #expect(ShapedIdentifier(malformed) == nil)
        }
    }

    @Test("a cohort over Apple's endpoints: sender's transfer identifier, the exchange and the sign-in agree; revocation is kept")
    func endpoints() async throws {
        try await Scenario.run(users: 1) { scenario in
            let emulator = scenario.emulator
            try emulator.createCohort(clientID: scenario.clientID, toTeamID: scenario.recipient.teamID)
            #expect(throws: EmulatorError.self) { try emulator.createCohort(clientID: scenario.clientID, toTeamID: scenario.recipient.teamID) }
            let subject = "000123.0123456789abcdef0123456789abcdef.0123"
            let revoker = "000124.0123456789abcdef0123456789abcdef.0124"
            #expect(emulator.credentialState(clientID: scenario.clientID, userIdentifier: subject) == .authorized)
            try emulator.revoke(clientID: scenario.clientID, userIdentifier: revoker)
            #expect(emulator.credentialState(clientID: scenario.clientID, userIdentifier: revoker) == .revoked)
            #expect(emulator.credentialState(clientID: scenario.clientID, userIdentifier: "not-apple-shaped") == .notFound)

            try emulator.initiateTransfer(clientID: scenario.clientID, toTeamID: scenario.recipient.teamID)
            let sender = try await scenario.senderCall(sub: subject)
            let transferSub = try #require(sender.json["transfer_sub"]?.stringValue)
            #expect(ShapedIdentifier(transferSub) != nil && transferSub != subject)
            #expect(try await scenario.senderCall(sub: subject).json["transfer_sub"]?.stringValue == transferSub)
            #expect(try await scenario.senderCall(sub: revoker).error == "invalid_request")
            #expect(try await scenario.senderCall(sub: "000123.0123456789abcdef").error == "invalid_request")
            // The stored users are still the emulator's as before.
            let stored = try await scenario.senderCall(sub: scenario.users[0].userIdentifier).json["transfer_sub"]?.stringValue
            #expect(stored != nil && stored != transferSub)

            _ = try emulator.acceptTransfer(clientID: scenario.clientID)
            let exchanged = try await scenario.recipientCall(transferSub: transferSub)
            let newSub = try #require(exchanged.json["sub"]?.stringValue)
            #expect(ShapedIdentifier(newSub) != nil && newSub != subject && newSub != transferSub)
            let claims = try await scenario.verifiedClaims(try emulator.authorize(clientID: scenario.clientID, user: subject, issueCode: false).idToken)
            #expect(claims["sub"]?.stringValue == newSub && claims["transfer_sub"]?.stringValue == transferSub)
            #expect(claims["email"]?.stringValue == exchanged.json["email"]?.stringValue || exchanged.json["email"] == nil)
            #expect(emulator.credentialState(clientID: scenario.clientID, userIdentifier: subject) == .transferred)

            // A user the recipient knows only by a transfer identifier of its own format.
            let recipientOnly = "tr000001.00000000000000000000000000000abc.0001"
            let answer = try await scenario.recipientCall(transferSub: recipientOnly)
            let token = try emulator.authorize(clientID: scenario.clientID, user: AppleEmulator.cohortUser(transferIdentifier: recipientOnly), issueCode: false)
            let recipientClaims = try CompactJWS.parse(token.idToken).claims()
            #expect(answer.json["sub"]?.stringValue == recipientClaims["sub"]?.stringValue && recipientClaims["transfer_sub"]?.stringValue == recipientOnly)
            #expect(try await scenario.recipientCall(transferSub: "has space").error == "invalid_request")
        }
    }

    @Test("addresses: about half private, each relay address Apple's shape and the team's own")
    func addresses() {
        let cohort = Cohort(clientID: "com.a", fromTeamID: "AAAAAAAAAA", toTeamID: "BBBBBBBBBB")
        // Apple-shaped identifiers one digit apart, as a table's generated ones are, and a recipient's own format.
        let identifiers = (0..<500).map { String(format: "000001.0123456789abcdef0123456789abcdef.%04d", $0) } + (0..<500).map { String(format: "t%05d", $0) }
        let emails = identifiers.map { cohort.email(ofTransferIdentifier: $0, team: "BBBBBBBBBB") }
        let relays = emails.filter(\.isPrivate)
        #expect((400...600).contains(relays.count))
        #expect(relays.allSatisfy { $0.email.utf8.count == 10 + "@privaterelay.appleid.com".utf8.count && $0.email.hasSuffix("@privaterelay.appleid.com") })
        #expect(Set(emails.map(\.email)).count == emails.count)
        #expect(cohort.email(ofTransferIdentifier: identifiers[1], team: "BBBBBBBBBB") == emails[1])
        // A relay address is the team's own; a real address is the same for every team.
        for (identifier, email) in zip(identifiers, emails).prefix(20) {
            let underA = cohort.email(ofTransferIdentifier: identifier, team: "AAAAAAAAAA")
            #expect(underA.isPrivate == email.isPrivate && (underA.email == email.email) == !email.isPrivate)
        }
    }
}
