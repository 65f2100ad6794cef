import Baton
import BatonService
import Foundation
import TestSupport
import Testing

/// Issue 40: `POST /v1/link/session` stores a row per request, so what a caller can make it store must stay bounded.
@Suite("Link sessions: the route's table stays bounded", .serialized)
struct LinkSessionTests {
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
}
