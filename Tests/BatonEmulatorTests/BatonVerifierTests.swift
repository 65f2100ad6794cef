import BatonEmulator
import BatonAppleSignIn
import Foundation
import BatonJOSE
import Testing

@Suite("Emulator tokens through Baton's identity-token verifier")
struct BatonVerifierTests {
    @Test("tokens verify with keys fetched from /auth/keys, before and after a transfer and a rotation")
    func verifies() async throws {
        try await Scenario.run(users: 2) { scenario in
            let emulator = scenario.emulator
            let keys = KeySetCache(url: emulator.baseURL.appendingPathComponent("auth/keys"), now: { emulator.now })
            let verifier = IdentityTokenVerifier(clientIDs: [scenario.clientID], keys: keys, now: { emulator.now })
            let user = scenario.users[0]

            let before = try await verifier.verify(try emulator.authorize(clientID: scenario.clientID, user: user.id, nonce: "web-nonce").idToken, nonce: .web("web-nonce"))
            #expect(before.subject == user.userIdentifier)
            #expect(before.email == user.email)
            #expect(before.isPrivateEmail == true)
            #expect(before.transferSubject == nil)

            let transferSubs = try await scenario.transferAll()
            try await emulator.rotateKeys()
            try emulator.advanceClock(by: 59 * 86_400)
            let during = try await verifier.verify(try emulator.authorize(clientID: scenario.clientID, user: user.userIdentifier).idToken)
            #expect(during.subject != user.userIdentifier)
            #expect(during.transferSubject == transferSubs[user.userIdentifier])

            try emulator.advanceClock(by: 2 * 86_400)
            let after = try await verifier.verify(try emulator.authorize(clientID: scenario.clientID, user: user.id).idToken)
            #expect(after.subject == during.subject)
            #expect(after.transferSubject == nil)
        }
    }

    @Test("a token for another client ID is refused by the verifier")
    func wrongAudience() async throws {
        try await Scenario.run(users: 1) { scenario in
            let emulator = scenario.emulator
            let verifier = IdentityTokenVerifier(clientIDs: ["com.example.other"], keys: FixedKeySet(emulator.jwks), now: { emulator.now })
            let token = try emulator.authorize(clientID: scenario.clientID, user: scenario.users[0].id).idToken
            await #expect(throws: VerificationError.self) { try await verifier.verify(token) }
        }
    }
}
