import Baton
import BatonService
import Foundation
import TestSupport
import Testing

@Suite("BatonService across a database outage", .serialized)
struct OutageTests {
    @Test("the database stopped mid-test: 503 and nothing written; restarted: the service recovers by itself", arguments: Mode.allCases)
    func outage(mode: Mode) async throws {
        let cluster = try PrivateCluster()
        defer { try? cluster.destroy() }
        try await ServiceFixture.run(mode, people: 2, databaseURL: cluster.url) { f in
            #expect(try await f.signIn(try f.token(f.people[0])).json["outcome"]?.stringValue == "migrated")
            try cluster.stop()
            let down = try await f.signIn(try f.token(f.people[1]))
            #expect(down.status == 503)
            #expect(down.error == "database_unavailable")
            let state = try await f.send("GET", "/v1/credential-state", query: ["user": f.people[1].oldSub])
            #expect(state.status == 503)
            let notReady = try await f.readyz(expecting: 503)
            #expect(notReady.status == 503)
            #expect(notReady.json["database"]?.boolValue == false)
            try cluster.restart()
            #expect(try f.count("SELECT count(*) FROM baton.events") == 1)
            let back = try await f.signIn(try f.token(f.people[1]))
            #expect(back.status == 200)
            #expect(back.json["outcome"]?.stringValue == "migrated")
            #expect(try await f.readyz(expecting: 200).status == 200)
            #expect(try f.count("SELECT count(*) FROM baton.events") == 2)
        }
    }
}
