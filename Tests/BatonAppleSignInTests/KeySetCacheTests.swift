import BatonAppleSignIn
import Foundation
import BatonJOSE
import BatonJSON
import Synchronization
import Testing

/// A key server stand-in: serves a document or fails, counts fetches, optionally takes its time.
final class FakeKeyServer: KeySetFetcher {
    struct Outage: Error {}
    private let state: Mutex<(document: [UInt8]?, fetches: Int)>
    private let delay: Duration

    init(_ keySet: JWKSet?, delay: Duration = .zero) {
        state = Mutex((keySet.map { JSON.serializeBytes($0.json()) }, 0))
        self.delay = delay
    }

    var fetches: Int { state.withLock { $0.fetches } }
    func serve(_ keySet: JWKSet?) { state.withLock { $0.document = keySet.map { JSON.serializeBytes($0.json()) } } }
    func serve(raw: String) { state.withLock { $0.document = Array(raw.utf8) } }

    func fetchKeySet() async throws -> [UInt8] {
        let document = state.withLock { state in
            state.fetches += 1
            return state.document
        }
        if delay != .zero { try await Task.sleep(for: delay) }
        guard let document else { throw Outage() }
        return document
    }
}

@Suite("Key-set cache")
struct KeySetCacheTests {
    static let newKey = try! RSAPrivateKey.generate()
    static let rotated = JWKSet(keys: Fixture.keySet.keys + [JWK(key: .rsa(newKey.publicKey), kid: "AppleKey4", use: "sig", alg: "RS256")])

    func verifier(_ cache: KeySetCache, _ clock: TestClock) -> IdentityTokenVerifier {
        IdentityTokenVerifier(clientIDs: [Fixture.clientID], keys: cache, now: { clock.now })
    }

    @Test("Loaded lazily on first use, then served from memory")
    func lazyLoad() async throws {
        let server = FakeKeyServer(Fixture.keySet)
        let clock = TestClock()
        let cache = KeySetCache(fetcher: server, now: { clock.now })
        #expect(cache.currentKeySet == nil && !cache.isReady)
        for index in 0..<3 {
            _ = try await verifier(cache, clock).verify(Fixture.token(key: Fixture.keys[index], kid: Fixture.kids[index]))
        }
        #expect(server.fetches == 1)
        #expect(cache.isReady)
    }

    @Test("Rotation: a token signed with a new key verifies after one refetch")
    func rotation() async throws {
        let server = FakeKeyServer(Self.rotated)
        let clock = TestClock()
        let cache = KeySetCache(fetcher: server, seed: Fixture.keySet, now: { clock.now })
        let token = Fixture.token(key: Self.newKey, kid: "AppleKey4")
        #expect(try await verifier(cache, clock).verify(token).keyID == "AppleKey4")
        #expect(server.fetches == 1)
        #expect(try await verifier(cache, clock).verify(token).keyID == "AppleKey4")
        #expect(server.fetches == 1)
    }

    @Test("After a load, a new kid waits for the cooldown before the one refetch")
    func rotationRespectsCooldown() async throws {
        let server = FakeKeyServer(Fixture.keySet)
        let clock = TestClock()
        let cache = KeySetCache(fetcher: server, now: { clock.now })
        _ = try await verifier(cache, clock).verify(Fixture.token())
        server.serve(Self.rotated)
        let token = Fixture.token(key: Self.newKey, kid: "AppleKey4")
        await #expect(throws: VerificationError(.unknownKey)) { try await verifier(cache, clock).verify(token) }
        #expect(server.fetches == 1)
        clock.advance(30)
        #expect(try await verifier(cache, clock).verify(token).keyID == "AppleKey4")
        #expect(server.fetches == 2)
    }

    @Test("1,000 tokens with random unknown kids cause at most one fetch per cooldown")
    func unknownKidStorm() async throws {
        let server = FakeKeyServer(Fixture.keySet, delay: .milliseconds(20))
        let clock = TestClock()
        let cache = KeySetCache(fetcher: server, seed: Fixture.keySet, now: { clock.now })
        let verifier = verifier(cache, clock)
        let tokens = (0..<1_000).map { _ in Fixture.token(kid: UUID().uuidString) }
        for round in 1...3 {
            let reasons = await withTaskGroup(of: VerificationError.Code?.self) { group in
                for token in tokens {
                    group.addTask {
                        do {
                            _ = try await verifier.verify(token)
                            return nil
                        } catch {
                            return (error as? VerificationError)?.code
                        }
                    }
                }
                var reasons: [VerificationError.Code?] = []
                for await reason in group { reasons.append(reason) }
                return reasons
            }
            #expect(reasons.allSatisfy { $0 == .unknownKey })
            #expect(server.fetches <= round, "round \(round): \(server.fetches) fetches")
            clock.advance(30)
        }
        #expect(server.fetches >= 1)
        #expect(try await verifier.verify(Fixture.token()).subject.isEmpty == false)
    }

    @Test("The last good set survives the key server going away, up to the staleness limit")
    func outage() async throws {
        let server = FakeKeyServer(Fixture.keySet)
        let clock = TestClock()
        let cache = KeySetCache(fetcher: server, now: { clock.now })
        let verifier = verifier(cache, clock)
        let token = { Fixture.token(claims: Fixture.claims { $0["iat"] = .number(clock.now.timeIntervalSince1970); $0["exp"] = .number(clock.now.timeIntervalSince1970 + 600) }) }
        _ = try await verifier.verify(token())
        server.serve(nil)
        clock.advance(3_601)
        _ = try await verifier.verify(token())
        #expect(cache.fetchCount == 2, "a background refresh was started")
        await #expect(throws: (any Error).self) { try await cache.refresh() }
        #expect(cache.currentKeySet == Fixture.keySet)
        clock.advance(40_000)
        _ = try await verifier.verify(token())
        #expect(cache.isReady)
        clock.advance(50_000)
        #expect(!cache.isReady)
        await #expect(throws: VerificationError(.keysUnavailable)) { try await verifier.verify(token()) }
        server.serve(Fixture.keySet)
        clock.advance(30)
        _ = try await verifier.verify(token())
        #expect(cache.isReady)
    }

    @Test("No set and no server: keys_unavailable, and no refetch before the cooldown")
    func nothingToServe() async {
        let server = FakeKeyServer(nil)
        let clock = TestClock()
        let cache = KeySetCache(fetcher: server, now: { clock.now })
        await #expect(throws: VerificationError(.keysUnavailable)) { try await verifier(cache, clock).verify(Fixture.token()) }
        await #expect(throws: VerificationError(.keysUnavailable)) { try await verifier(cache, clock).verify(Fixture.token()) }
        #expect(server.fetches == 1)
    }

    @Test("A refused set (duplicate kids, weak key, bad JSON) does not replace the good one", arguments: [
        JSON.serialize(JWKSet(keys: Fixture.keySet.keys + [Fixture.keySet.keys[0]]).json()),
        #"{"keys":[{"kty":"RSA","n":"AQAB","e":"AQAB","kid":"weak"}]}"#,
        #"{"keys":"#,
        #"<html>moved</html>"#,
    ])
    func refusedSet(document: String) async throws {
        let server = FakeKeyServer(nil)
        server.serve(raw: document)
        let clock = TestClock()
        let cache = KeySetCache(fetcher: server, seed: Fixture.keySet, now: { clock.now })
        await #expect(throws: (any Error).self) { try await cache.refresh() }
        #expect(cache.currentKeySet == Fixture.keySet)
        #expect(try await verifier(cache, clock).verify(Fixture.token()).subject.isEmpty == false)
    }

    @Test("Expiry and iat are judged by the injected clock, not the system's")
    func injectedClock() async throws {
        let clock = TestClock()
        let cache = KeySetCache(fetcher: FakeKeyServer(nil), seed: Fixture.keySet, now: { clock.now })
        let token = Fixture.token()
        #expect(try await verifier(cache, clock).verify(token).subject.isEmpty == false)
        clock.advance(-200)
        await #expect(throws: VerificationError(.notYetValid)) { try await verifier(cache, clock).verify(token) }
        clock.advance(200 + 600)
        await #expect(throws: VerificationError(.expired)) { try await verifier(cache, clock).verify(token) }
    }

    @Test("The HTTP fetcher refuses non-HTTP URLs and reports an unreachable server")
    func httpFetcherFailures() async {
        await #expect(throws: HTTPKeySetFetcher.FetchError.self) {
            try await HTTPKeySetFetcher(url: URL(fileURLWithPath: "/etc/passwd")).fetchKeySet()
        }
        await #expect(throws: HTTPKeySetFetcher.FetchError.self) {
            try await HTTPKeySetFetcher(url: URL(string: "http://127.0.0.1:9/auth/keys")!, timeout: 2).fetchKeySet()
        }
    }
}
