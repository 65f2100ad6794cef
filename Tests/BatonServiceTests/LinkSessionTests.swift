import BatonAppleSignIn
import Baton
import BatonHTTPServer
import BatonJSON
import BatonService
import Foundation
import Synchronization
import TestSupport
import Testing

/// Issue 40: `POST /v1/link/session` stores a row per request, so what a caller can make it store must stay bounded.
@Suite("Link sessions: the route's table stays bounded", .serialized)
struct LinkSessionTests {
    @Test("each session opened deletes up to 100 expired ones on the route's own path, with no sign-in needed")
    func purgedByTheRoute() async throws {
        try await ServiceFixture.run(.inProcess, people: 1) { f in
            _ = try TestDatabase.psql(f.url, """
                INSERT INTO baton.link_sessions (nonce_hash, expires_at)
                SELECT 'expired-' || i, now() - interval '1 hour' FROM generate_series(1, 250) i
                """)
            for left in [150, 50, 0] {
                #expect(try await f.postJSON("/v1/link/session", [:]).status == 201)
                #expect(try f.count("SELECT count(*) FROM baton.link_sessions WHERE expires_at < now()") == left)
            }
            #expect(try f.count("SELECT count(*) FROM baton.link_sessions") == 3)
        }
    }

    @Test("with a service token configured the route requires it: without it 401 with error and reason, and nothing is stored",
          arguments: Mode.allCases)
    func serviceToken(mode: Mode) async throws {
        let token = "service-token-0123456789"
        try await ServiceFixture.run(mode, people: 1, serviceToken: token) { f in
            let refused = try await f.postJSON("/v1/link/session", [:])
            #expect(refused.status == 401)
            #expect(refused.error == "unauthorized")
            #expect(refused.reason?.isEmpty == false)
            let wrong = try await f.send("POST", "/v1/link/session", headers: ["Authorization": "Bearer wrong-token-0123456789"])
            #expect(wrong.status == 401)
            #expect(try f.count("SELECT count(*) FROM baton.link_sessions") == 0)
            let opened = try await f.send("POST", "/v1/link/session", headers: ["Authorization": "Bearer \(token)"])
            #expect(opened.status == 201)
            #expect(try f.count("SELECT count(*) FROM baton.link_sessions") == 1)
        }
    }

    @Test("past the configured maximum of live sessions the route answers 503 too_many_link_sessions with a reason and stores nothing, for a second without asking the database; an expired session frees its place")
    func capped() async throws {
        try await ServiceFixture.run(.inProcess, people: 1) { f in
            let clock = Mutex(Date())
            let engine = BatonEngine(store: f.engine.store, keys: FixedKeySet(f.emulator.jwks), clientIDs: [ServiceFixture.clientID],
                                     legacyClientIDs: [ServiceFixture.legacyClientID], maxLinkSessions: 3, now: { clock.withLock { $0 } })
            let router = BatonAPI(engine: engine, adminToken: nil).router()
            let open = { await router.respond(to: HTTPRequest(method: "POST", path: "/v1/link/session")) }
            for _ in 1...3 { #expect(await open().status == 201) }
            for _ in 1...5 {
                let refused = await open()
                #expect(refused.status == 503)
                let body = try JSON.parseObject(refused.body)
                #expect(body["error"]?.stringValue == "too_many_link_sessions")
                #expect(body["reason"]?.stringValue?.isEmpty == false)
            }
            #expect(try f.count("SELECT count(*) FROM baton.link_sessions") == 3)
            // Within the second after a refusal the engine refuses without a statement, even with the table emptied.
            _ = try TestDatabase.psql(f.url, "UPDATE baton.link_sessions SET expires_at = expires_at - interval '1 hour'")
            #expect(await open().status == 503)
            clock.withLock { $0 = $0.addingTimeInterval(1) }
            #expect(await open().status == 201)
            #expect(try f.count("SELECT count(*) FROM baton.link_sessions") == 1)  // the three expired ones deleted on the way
        }
    }

    @Test("200 sessions asked at once with a maximum of 20: at most 20 plus the pool's 4 connections are stored, the rest refused with 503")
    func cappedUnderConcurrency() async throws {
        try await ServiceFixture.run(.inProcess, people: 1) { f in
            let engine = BatonEngine(store: f.engine.store, keys: FixedKeySet(f.emulator.jwks), clientIDs: [ServiceFixture.clientID],
                                     legacyClientIDs: [ServiceFixture.legacyClientID], maxLinkSessions: 20)
            let router = BatonAPI(engine: engine, adminToken: nil).router()
            let statuses = await withTaskGroup(of: Int.self) { group in
                for _ in 0..<200 { group.addTask { await router.respond(to: HTTPRequest(method: "POST", path: "/v1/link/session")).status } }
                return await group.reduce(into: [Int: Int]()) { $0[$1, default: 0] += 1 }
            }
            let stored = try f.count("SELECT count(*) FROM baton.link_sessions")
            #expect(stored >= 20 && stored <= 24, "\(stored) sessions stored")
            #expect(statuses[201] == stored)
            #expect(statuses[503] == 200 - stored)
        }
    }
}
