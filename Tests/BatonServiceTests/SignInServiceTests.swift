import BatonAppleSignIn
import BatonBuildInfo
import BatonEmulator
import Baton
import BatonConcurrency
import BatonPostgres
import BatonService
import Foundation
import BatonJOSE
import BatonJSON
import TestSupport
import Testing

@Suite("BatonService: sign-in, credential state, link, notifications (in-process and live)", .serialized)
struct SignInServiceTests {
    @Test("each outcome: migrated, then current; new for an unknown user", arguments: Mode.allCases)
    func outcomes(mode: Mode) async throws {
        try await ServiceFixture.run(mode) { f in
            let person = f.people[0]
            let newSub = try f.newSub(person)
            let migrated = try await f.signIn(try f.token(person))
            #expect(migrated.status == 200)
            #expect(migrated.json["outcome"]?.stringValue == "migrated")
            #expect(migrated.json["sub"]?.stringValue == newSub)
            #expect(migrated.json["transfer_sub"]?.stringValue == person.transferSub)
            let key = try #require(migrated.json["user"]?["key"]?.stringValue)
            #expect(try TestDatabase.psql(f.url, "SELECT id FROM users WHERE apple_sub = '\(newSub)'") == key)
            // The relay address of the sending team was replaced by the recipient's.
            let newEmail = try #require(migrated.json["user"]?["email"]?.stringValue)
            #expect(newEmail != person.email && newEmail.hasSuffix("@privaterelay.appleid.com"))

            let current = try await f.signIn(try f.token(person))
            #expect(current.status == 200)
            #expect(current.json["outcome"]?.stringValue == "current")
            #expect(current.json["user"]?["key"]?.stringValue == key)

            let stranger = try f.emulator.createUsers(clientID: ServiceFixture.clientID, count: 1)[0]
            let new = try await f.signIn(try f.emulator.authorize(clientID: ServiceFixture.clientID, user: stranger.id).idToken)
            #expect(new.status == 200)
            #expect(new.json["outcome"]?.stringValue == "new")
            #expect(new.json["user"] == .null)
            #expect(try f.count("SELECT count(*) FROM baton.events") == 1)
            #expect(try f.count("SELECT count(*) FROM baton.transfers WHERE state = 'migrated' AND method = 'signin'") == 1)
        }
    }

    @Test("Apple's web form_post body is accepted", arguments: Mode.allCases)
    func formPost(mode: Mode) async throws {
        try await ServiceFixture.run(mode, people: 1) { f in
            let token = try f.token(f.people[0])
            let body = "code=c.x&state=abc&id_token=\(token)&user=%7B%22name%22%3A%7B%7D%7D"
            let reply = try await f.send("POST", "/v1/signin", contentType: "application/x-www-form-urlencoded", body: Array(body.utf8))
            #expect(reply.status == 200)
            #expect(reply.json["outcome"]?.stringValue == "migrated")
        }
    }

    @Test("50 users × 8 simultaneous first sign-ins: 50 rewrites, 50 events, 400 answers of 200", arguments: Mode.allCases)
    func simultaneous(mode: Mode) async throws {
        try await ServiceFixture.run(mode, people: 50) { f in
            var tokens: [(Int, String)] = []
            for (index, person) in f.people.enumerated() {
                for _ in 0..<8 { tokens.append((index, try f.token(person))) }
            }
            let replies = try await withThrowingTaskGroup(of: (Int, Reply).self) { group in
                for (index, token) in tokens { group.addTask { (index, try await f.signIn(token)) } }
                return try await group.reduce(into: [(Int, Reply)]()) { $0.append($1) }
            }
            #expect(replies.count == 400)
            #expect(replies.allSatisfy { $0.1.status == 200 })
            var migratedPerUser = [Int: Int](), keysPerUser = [Int: Set<String>]()
            for (index, reply) in replies {
                if reply.json["outcome"]?.stringValue == "migrated" { migratedPerUser[index, default: 0] += 1 }
                #expect(["migrated", "current"].contains(reply.json["outcome"]?.stringValue ?? ""))
                keysPerUser[index, default: []].insert(reply.json["user"]?["key"]?.stringValue ?? "")
            }
            #expect(migratedPerUser.count == 50 && migratedPerUser.values.allSatisfy { $0 == 1 })
            #expect(keysPerUser.values.allSatisfy { $0.count == 1 && !$0.contains("") })
            #expect(try f.count("SELECT count(*) FROM baton.events WHERE kind = 'migrated'") == 50)
            #expect(try f.count("SELECT count(*) FROM baton.transfers WHERE state = 'migrated'") == 50)
        }
    }

    @Test("on an event loop, a migration's statements go through the loop's pipeline: a free record is rewritten there; a held one fails at once, writes nothing, and the async way finishes it")
    func lockedRecordOnLoop() async throws {
        try await ServiceFixture.run(.inProcess, people: 2) { f in
            let (first, second) = (try f.token(f.people[0]), try f.token(f.people[1]))
            let pool = try #require((f.engine.store as? LegacyStore)?.pool)
            let loop = try EventLoop()
            loop.start(name: "sign-in-test")
            defer { loop.stop() }
            let free = try await signInOnLoop(f.engine, first, loop: loop, pool: pool)
            guard case .now(let done) = free else {
                Issue.record("a free record was not rewritten on the loop")
                return
            }
            #expect(done.outcome == .migrated)
            #expect(try f.count("SELECT count(*) FROM baton.events WHERE kind = 'migrated'") == 1)
            let holder = try await PostgresConnection.connect(url: f.url)
            try await holder.executeScript(unsafeSQL: "BEGIN; SELECT 1 FROM users WHERE apple_sub = '\(f.people[1].oldSub)' FOR UPDATE")
            let locked = try await signInOnLoop(f.engine, second, loop: loop, pool: pool)
            guard case .later(let work) = locked else {
                Issue.record("the loop's statement waited for the locked record")
                try await holder.executeScript(unsafeSQL: "ROLLBACK")
                return
            }
            #expect(try f.count("SELECT count(*) FROM users WHERE apple_sub = '\(f.people[1].oldSub)'") == 1)
            #expect(try f.count("SELECT count(*) FROM baton.events WHERE kind = 'migrated'") == 1)
            let finishing = Task { try await work() }
            try await holder.executeScript(unsafeSQL: "ROLLBACK")
            let result = try await finishing.value
            #expect(result.outcome == .migrated)
            #expect(try f.count("SELECT count(*) FROM baton.events WHERE kind = 'migrated'") == 2)
            #expect(try f.count("SELECT count(*) FROM users WHERE apple_sub = '\(f.people[1].oldSub)'") == 0)
        }
    }

    @Test("on an event loop, a nonce is consumed on the pipeline before the sign-in's statements, once: a replay is refused and writes nothing, and a sign-in finished the async way does not consume it again")
    func nonceOnLoop() async throws {
        try await ServiceFixture.run(.inProcess, people: 2) { f in
            let hashed = Digest.sha256Hex(Array("loop-nonce".utf8))
            let expected = ExpectedNonce.native(raw: "loop-nonce")
            let (first, second) = (try f.token(f.people[0], nonce: hashed), try f.token(f.people[1], nonce: hashed))
            let pool = try #require((f.engine.store as? LegacyStore)?.pool)
            let loop = try EventLoop()
            loop.start(name: "nonce-test")
            defer { loop.stop() }
            let signedIn = try await signInOnLoop(f.engine, first, nonce: expected, loop: loop, pool: pool)
            guard case .now(let done) = signedIn else {
                Issue.record("a free record with a nonce was not rewritten on the loop")
                return
            }
            #expect(done.outcome == .migrated)
            #expect(try f.count("SELECT count(*) FROM baton.nonces WHERE sub = '\(done.sub)'") == 1)
            // The same token again: refused on the pipeline, nothing else written.
            do {
                _ = try await signInOnLoop(f.engine, first, nonce: expected, loop: loop, pool: pool)
                Issue.record("a replayed nonce was accepted")
            } catch let error as BatonError {
                #expect(error.code == .nonceReused)
            }
            #expect(try f.count("SELECT count(*) FROM baton.events") == 1)
            #expect(try f.count("SELECT count(*) FROM baton.nonces") == 1)
            // A held record: the nonce is consumed on the loop, the migration goes the async way and succeeds
            // without consuming it again.
            let holder = try await PostgresConnection.connect(url: f.url)
            try await holder.executeScript(unsafeSQL: "BEGIN; SELECT 1 FROM users WHERE apple_sub = '\(f.people[1].oldSub)' FOR UPDATE")
            let locked = try await signInOnLoop(f.engine, second, nonce: expected, loop: loop, pool: pool)
            guard case .later(let work) = locked else {
                Issue.record("the loop's statement waited for the locked record")
                try await holder.executeScript(unsafeSQL: "ROLLBACK")
                return
            }
            #expect(try f.count("SELECT count(*) FROM baton.nonces") == 2)
            let finishing = Task { try await work() }
            try await holder.executeScript(unsafeSQL: "ROLLBACK")
            #expect(try await finishing.value.outcome == .migrated)
            #expect(try f.count("SELECT count(*) FROM baton.events WHERE kind = 'migrated'") == 2)
            #expect(try f.count("SELECT count(*) FROM baton.nonces") == 2)
        }
    }

    @Test("an old-team token replayed after migration changes nothing", arguments: Mode.allCases)
    func replay(mode: Mode) async throws {
        try await ServiceFixture.run(mode, people: 2, acceptTransfer: false) { f in
            let person = f.people[0]
            let oldToken = try f.token(person)  // issued by the sending team, before the transfer is accepted
            try f.emulator.acceptTransfer(clientID: ServiceFixture.clientID)
            #expect(try await f.signIn(try f.token(person)).json["outcome"]?.stringValue == "migrated")
            let before = try TestDatabase.psql(f.url, "SELECT string_agg(id || ':' || apple_sub || ':' || email, ',' ORDER BY id) FROM users")
            let replayed = try await f.signIn(oldToken)
            #expect(replayed.status == 200)
            #expect(replayed.json["outcome"]?.stringValue == "new")
            #expect(try TestDatabase.psql(f.url, "SELECT string_agg(id || ':' || apple_sub || ':' || email, ',' ORDER BY id) FROM users") == before)
            #expect(try f.count("SELECT count(*) FROM baton.events") == 1)
        }
    }

    @Test("a nonce is checked for the stated flow and single-use per subject", arguments: Mode.allCases)
    func nonce(mode: Mode) async throws {
        let f = try await ServiceFixture(mode, people: 2)
        let hashed = Digest.sha256Hex(Array("nonce-123".utf8))
        let token = try f.token(f.people[0], nonce: hashed)
        #expect(try await f.signIn(token, nonce: "other").json["reason"]?.stringValue == "nonce_mismatch")
        // The web flow compares the claim as is: the hash is not the raw nonce.
        #expect(try await f.signIn(token, nonce: "nonce-123", flow: "web").json["reason"]?.stringValue == "nonce_mismatch")
        #expect(try await f.signIn(token, nonce: "nonce-123", flow: "sideways").error == "invalid_request")
        #expect(try await f.signIn(token, nonce: "nonce-123").status == 200)
        let again = try await f.signIn(token, nonce: "nonce-123")
        #expect(again.status == 401)
        #expect(again.error == "nonce_reused")
        // Kept until exp + leeway + margin, not only until exp: no replay inside the leeway.
        // (The emulator's tokens live 600 s; the nonce must outlive exp by the 60 s leeway and a 300 s margin.)
        let kept = try TestDatabase.psql(f.url, "SELECT count(*) FROM baton.nonces WHERE expires_at >= now() + interval '\(600 + 60 + 300 - 30) seconds'")
        #expect(kept == "1")
        // Scoped per subject: another person's token with the same nonce is not a replay.
        #expect(try await f.signIn(try f.token(f.people[1], nonce: hashed), nonce: "nonce-123").status == 200)
        // A raw claim is not accepted where the native flow expects its hash, nor a hash in the web flow.
        let raw = try f.token(f.people[1], nonce: "web-nonce")
        #expect(try await f.signIn(raw, nonce: "web-nonce").json["reason"]?.stringValue == "nonce_mismatch")
        #expect(try await f.signIn(raw, nonce: "web-nonce", flow: "web").status == 200)
        await f.close()
    }

    @Test("require_nonce refuses a sign-in without a nonce")
    func requiredNonce() async throws {
        let f = try await ServiceFixture(.inProcess, people: 1, requireNonce: true)
        let missing = try await f.signIn(try f.token(f.people[0]))
        #expect(missing.status == 400)
        #expect(missing.error == "invalid_request")
        #expect(try f.count("SELECT count(*) FROM baton.events") == 0)
        let token = try f.token(f.people[0], nonce: Digest.sha256Hex(Array("n-1".utf8)))
        #expect(try await f.signIn(token, nonce: "n-1").json["outcome"]?.stringValue == "migrated")
        await f.close()
    }

    @Test("credential states: authorized, transferred, revoked, not_found", arguments: Mode.allCases)
    func credentialStates(mode: Mode) async throws {
        try await ServiceFixture.run(mode, people: 3) { f in
            let migrated = f.people[0]
            _ = try await f.signIn(try f.token(migrated))
            let revoked = try f.newSub(f.people[2])
            try await f.pool.execute("INSERT INTO public.users (apple_sub) VALUES (\(revoked))")
            #expect(try await f.postJSON("/v1/notifications", ["payload": .string(try f.notification(type: "consent-revoked", sub: revoked))]).status == 200)
            let cases: [(String, String)] = [
                (try f.newSub(migrated), "authorized"), (migrated.oldSub, "transferred"), (f.people[1].oldSub, "transferred"),
                (revoked, "revoked"), ("000000.unknown.0000", "not_found"),
            ]
            for (user, state) in cases {
                let reply = try await f.send("GET", "/v1/credential-state", query: ["user": user])
                #expect(reply.status == 200)
                #expect(reply.json["state"]?.stringValue == state, "\(user)")
            }
            #expect(try await f.send("GET", "/v1/credential-state").status == 400)
        }
    }

    /// A `/v1/link` body with both tokens and the session's nonce.
    private func linkBody(_ legacy: String, _ current: String, nonce: String?) -> JSONObject {
        var body: JSONObject = ["legacy_id_token": .string(legacy), "id_token": .string(current)]
        if let nonce { body["nonce"] = .string(nonce) }
        return body
    }

    /// A link session's nonce from `POST /v1/link/session`, and the claim a native ceremony puts in its tokens.
    private func openSession(_ f: ServiceFixture) async throws -> (nonce: String, claim: String) {
        let reply = try await f.postJSON("/v1/link/session", [:])
        #expect(reply.status == 201)
        let nonce = try #require(reply.json["nonce"]?.stringValue)
        #expect(nonce.count == 43)  // 32 random bytes, base64url
        #expect((reply.json["expires_in"]?.intValue ?? 0) > 0)
        return (nonce, Digest.sha256Hex(Array(nonce.utf8)))
    }

    @Test("link rewrites the old record; a second link is current; a taken identifier is 409", arguments: Mode.allCases)
    func link(mode: Mode) async throws {
        let f = try await ServiceFixture(mode, people: 2)
        let s1 = try await openSession(f)
        let linked = try await f.postJSON("/v1/link", linkBody(try f.legacyToken(f.people[0], nonce: s1.claim), try f.token(f.people[0], nonce: s1.claim),
                                                               nonce: s1.nonce))
        #expect(linked.status == 200)
        #expect(linked.json["outcome"]?.stringValue == "migrated")
        #expect(try f.count("SELECT count(*) FROM baton.transfers WHERE method = 'link' AND state = 'migrated'") == 1)
        let s2 = try await openSession(f)
        let again = try await f.postJSON("/v1/link", linkBody(try f.legacyToken(f.people[0], nonce: s2.claim), try f.token(f.people[0], nonce: s2.claim),
                                                              nonce: s2.nonce))
        #expect(again.json["outcome"]?.stringValue == "current")
        // Another record already carries the second person's new identifier.
        try await f.pool.execute("INSERT INTO public.users (apple_sub) VALUES (\(try f.newSub(f.people[1])))")
        let s3 = try await openSession(f)
        let conflict = try await f.postJSON("/v1/link", linkBody(try f.legacyToken(f.people[1], nonce: s3.claim), try f.token(f.people[1], nonce: s3.claim),
                                                                 nonce: s3.nonce))
        #expect(conflict.status == 409)
        #expect(conflict.error == "conflict")
        #expect(try f.count("SELECT count(*) FROM users WHERE apple_sub = '\(f.people[1].oldSub)'") == 1)
        let missing = try await f.postJSON("/v1/link", ["id_token": .string(try f.token(f.people[1]))])
        #expect(missing.status == 400)
        await f.close()
    }

    @Test("a refused link records no duplicate of a record Baton migrated: no merge can hand that account to another person's old record")
    func refusedLinkIsNoDuplicate() async throws {
        let f = try await ServiceFixture(.live, people: 2, onDuplicate: .merge)
        let (owner, other) = (f.people[0], f.people[1])
        let first = try await f.signIn(try f.token(owner))
        #expect(first.json["outcome"]?.stringValue == "migrated")
        let ownerKey = try #require(first.json["user"]?["key"]?.stringValue)
        // Someone holding the other person's sending-team token and the owner's current token links them in one session.
        let session = try await openSession(f)
        let link = try await f.postJSON("/v1/link", linkBody(try f.legacyToken(other, nonce: session.claim), try f.token(owner, nonce: session.claim),
                                                             nonce: session.nonce))
        #expect(link.status == 409 && link.error == "conflict", "\(link.json)")
        #expect(try f.count("SELECT count(*) FROM baton.duplicates") == 0)
        #expect(try f.count("SELECT count(*) FROM users WHERE apple_sub = '\(other.oldSub)'") == 1)
        let again = try await f.signIn(try f.token(owner))
        #expect(again.json["outcome"]?.stringValue == "current" && again.json["user"]?["key"]?.stringValue == ownerKey, "\(again.json)")
        await f.close()
    }

    @Test("a link whose current token carries another person's transfer identifier marks only the linked record's transfer row")
    func linkMarksOnlyItsOwnTransferRow() async throws {
        let f = try await ServiceFixture(.live, people: 2)
        let (linked, other) = (f.people[1], f.people[0])
        let session = try await openSession(f)
        let link = try await f.postJSON("/v1/link", linkBody(try f.legacyToken(linked, nonce: session.claim), try f.token(other, nonce: session.claim),
                                                             nonce: session.nonce))
        #expect(link.json["outcome"]?.stringValue == "migrated", "\(link.json)")
        #expect(try TestDatabase.psql(f.url, "SELECT state FROM baton.transfers WHERE old_sub = '\(linked.oldSub)'") == "migrated")
        #expect(try TestDatabase.psql(f.url, "SELECT state || ' ' || coalesce(legacy_key, '-') FROM baton.transfers WHERE old_sub = '\(other.oldSub)'")
                == "pending -")
        #expect(try f.count("SELECT count(*) FROM baton.transfers") == 2)
        await f.close()
    }

    @Test("a new email the column cannot hold is dropped on every sign-in, not only the first: current, never 500")
    func emailTooLongForTheColumn() async throws {
        let f = try await ServiceFixture(.live, people: 1, emailPolicy: .always, prepare: { url in
            _ = try TestDatabase.psql(url, "UPDATE users SET email = 'a@b.c'; ALTER TABLE users ALTER COLUMN email TYPE varchar(20)")
        })
        let person = f.people[0]
        #expect(person.email.count > 20)
        let first = try await f.signIn(try f.token(person))
        #expect(first.status == 200 && first.json["outcome"]?.stringValue == "migrated", "\(first.json)")
        for _ in 0..<3 {
            let next = try await f.signIn(try f.token(person))
            #expect(next.status == 200 && next.json["outcome"]?.stringValue == "current", "\(next.json)")
        }
        #expect(try TestDatabase.psql(f.url, "SELECT email FROM users") == "a@b.c")
        #expect(try f.count("SELECT count(*) FROM baton.events WHERE kind = 'email_conflict'") >= 2)
        await f.close()
    }

    @Test("link needs a live session whose nonce both tokens carry, a sending-team token, and a subject awaiting migration", arguments: Mode.allCases)
    func linkRefusals(mode: Mode) async throws {
        let f = try await ServiceFixture(mode, people: 2)
        let session = try await openSession(f)
        let legacy = try f.legacyToken(f.people[0], nonce: session.claim)
        let current = try f.token(f.people[0], nonce: session.claim)
        let noNonce = try await f.postJSON("/v1/link", linkBody(legacy, current, nonce: nil))
        #expect(noNonce.status == 400)
        #expect(noNonce.error == "missing_field")
        let otherSession = try await f.postJSON("/v1/link", linkBody(legacy, try f.token(f.people[0], nonce: Digest.sha256Hex(Array("x".utf8))),
                                                                     nonce: session.nonce))
        #expect(otherSession.reason == "nonce_mismatch")
        // Two current-team tokens (X's as "legacy", Y's as current): the legacy one is refused by its audience.
        let swapped = try await f.postJSON("/v1/link", linkBody(try f.token(f.people[1], nonce: session.claim), current, nonce: session.nonce))
        #expect(swapped.status == 401)
        #expect(swapped.reason == "wrong_audience")
        // A nonce Baton never issued is no session, whatever the tokens carry.
        let made = Digest.sha256Hex(Array("made-up".utf8))
        let madeUp = try await f.postJSON("/v1/link", linkBody(try f.legacyToken(f.people[0], nonce: made), try f.token(f.people[0], nonce: made),
                                                               nonce: "made-up"))
        #expect(madeUp.status == 401)
        #expect(madeUp.error == "nonce_reused")
        // Person 0 migrates by signing in; their old identifier can then not be linked to another person.
        #expect(try await f.signIn(try f.token(f.people[0])).json["outcome"]?.stringValue == "migrated")
        let s2 = try await openSession(f)
        let stolen = try await f.postJSON("/v1/link", linkBody(try f.legacyToken(f.people[0], nonce: s2.claim), try f.token(f.people[1], nonce: s2.claim),
                                                               nonce: s2.nonce))
        #expect(stolen.status == 409)
        #expect(stolen.error == "not_linkable")
        #expect(try f.count("SELECT count(*) FROM baton.events WHERE method = 'link'") == 0)
        // A session is good for one link.
        let s3 = try await openSession(f)
        let body = linkBody(try f.legacyToken(f.people[1], nonce: s3.claim), try f.token(f.people[1], nonce: s3.claim), nonce: s3.nonce)
        #expect(try await f.postJSON("/v1/link", body).json["outcome"]?.stringValue == "migrated")
        #expect(try await f.postJSON("/v1/link", body).error == "nonce_reused")
        await f.close()
    }

    @Test("a captured legacy token cannot take over the account: its session is used up by the victim's own link, and its nonce by the first link that presents it", arguments: Mode.allCases)
    func linkTakeover(mode: Mode) async throws {
        let f = try await ServiceFixture(mode, people: 2)
        let (victim, attacker) = (f.people[0], f.people[1])
        // The victim already has a new-team record, so their own link answers 409.
        try await f.pool.execute("INSERT INTO public.users (apple_sub) VALUES (\(try f.newSub(victim)))")
        let session = try await openSession(f)
        let victimLegacy = try f.legacyToken(victim, nonce: session.claim)
        let own = try await f.postJSON("/v1/link", linkBody(victimLegacy, try f.token(victim, nonce: session.claim), nonce: session.nonce))
        #expect(own.error == "conflict")
        // The attacker holds the victim's legacy token and presents it with their own current-team token carrying
        // the same nonce (a web flow lets them choose the claim): the session is used up.
        let replay = try await f.postJSON("/v1/link", linkBody(victimLegacy, try f.token(attacker, nonce: session.claim), nonce: session.nonce))
        #expect(replay.status == 401)
        #expect(replay.error == "nonce_reused")
        // A session of the attacker's own does not match the nonce the victim's token carries.
        let theirs = try await openSession(f)
        let paired = try await f.postJSON("/v1/link", linkBody(victimLegacy, try f.token(attacker, nonce: theirs.claim), nonce: theirs.nonce))
        #expect(paired.reason == "nonce_mismatch")
        // Nothing moved: the victim's legacy record still carries the sending team's identifier.
        #expect(try f.count("SELECT count(*) FROM users WHERE apple_sub = '\(victim.oldSub)'") == 1)
        #expect(try f.count("SELECT count(*) FROM baton.events WHERE kind = 'migrated'") == 0)
        await f.close()
    }

    @Test("a second account made during the cutover: recorded once and left as it is (report), or merged at sign-in (merge)",
          arguments: [DuplicatePolicy.report, .merge])
    func duplicateAtSignIn(policy: DuplicatePolicy) async throws {
        let f = try await ServiceFixture(.live, people: 2, onDuplicate: policy)
        // The application made a fresh record for person 0 under the new identifier, without Baton.
        let freshKey = try TestDatabase.psql(f.url, "INSERT INTO public.users (apple_sub, email) VALUES ('\(try f.newSub(f.people[0]))', 'fresh@example.com') RETURNING id")
        let before = try TestDatabase.psql(f.url, "SELECT string_agg(id || '|' || coalesce(apple_sub, '-') || '|' || coalesce(email, '-'), ';' ORDER BY id) FROM users")
        let first = try await f.signIn(try f.token(f.people[0]))
        let second = try await f.signIn(try f.token(f.people[0]))
        #expect(try f.count("SELECT count(*) FROM baton.duplicates WHERE found_by = 'signin' AND fresh_key = '\(freshKey)'") == 1)
        switch policy {
        case .report:
            #expect(first.json["outcome"]?.stringValue == "current" && first.json["user"]?["key"]?.stringValue == freshKey)
            #expect(second.json["outcome"]?.stringValue == "current")
            #expect(try TestDatabase.psql(f.url, "SELECT string_agg(id || '|' || coalesce(apple_sub, '-') || '|' || coalesce(email, '-'), ';' ORDER BY id) FROM users") == before)
        case .merge:
            #expect(first.json["outcome"]?.stringValue == "migrated", "\(first.json)")
            #expect(first.json["merged_from"]?.stringValue == freshKey)
            let legacyKey = try #require(first.json["user"]?["key"]?.stringValue)
            #expect(legacyKey != freshKey)
            #expect(try TestDatabase.psql(f.url, "SELECT apple_sub FROM users WHERE id = \(legacyKey)") == (try f.newSub(f.people[0])))
            #expect(try f.count("SELECT count(*) FROM users WHERE id = \(freshKey) AND apple_sub IS NULL") == 1)
            #expect(second.json["outcome"]?.stringValue == "current" && second.json["user"]?["key"]?.stringValue == legacyKey)
            #expect(try f.count("SELECT count(*) FROM baton.duplicates WHERE merged_at IS NOT NULL") == 1)
        }
        // Person 1 has no second account: an ordinary migration.
        #expect(try await f.signIn(try f.token(f.people[1])).json["outcome"]?.stringValue == "migrated")
        #expect(try f.count("SELECT count(*) FROM baton.duplicates") == 1)
        await f.close()
    }

    @Test("a token's nonce claim is consumed whether or not the request names it, and a native claim is no web-flow nonce", arguments: Mode.allCases)
    func nonceReplays(mode: Mode) async throws {
        let f = try await ServiceFixture(mode, people: 2)
        let claim = Digest.sha256Hex(Array("raw-1".utf8))
        let token = try f.token(f.people[0], nonce: claim)
        #expect(try await f.signIn(token, nonce: "raw-1").json["outcome"]?.stringValue == "migrated")
        let again = try await f.signIn(token, nonce: "raw-1")
        #expect(again.error == "nonce_reused")
        // Leaving the nonce out does not make the token good again.
        let withoutNonce = try await f.signIn(token)
        #expect(withoutNonce.status == 401)
        #expect(withoutNonce.error == "nonce_reused")
        // A native token presented as a web flow with its own (public) claim as the nonce is refused before anything.
        let other = try f.token(f.people[1], nonce: Digest.sha256Hex(Array("raw-2".utf8)))
        let downgraded = try await f.signIn(other, nonce: Digest.sha256Hex(Array("raw-2".utf8)), flow: "web")
        #expect(downgraded.status == 401)
        #expect(downgraded.reason == "nonce_mismatch")
        // The first presentation without naming the nonce consumes it too.
        #expect(try await f.signIn(other).json["outcome"]?.stringValue == "migrated")
        #expect(try await f.signIn(other, nonce: "raw-2").error == "nonce_reused")
        #expect(try f.count("SELECT count(*) FROM baton.nonces") == 2)
        await f.close()
    }

    @Test("notifications: stale ones refused; a replayed revocation does not undo a later sign-in", arguments: Mode.allCases)
    func notificationFreshness(mode: Mode) async throws {
        let f = try await ServiceFixture(mode, people: 1)
        let person = f.people[0]
        let sub = try f.newSub(person)
        let stale = try await f.postJSON("/v1/notifications", ["payload": .string(try f.notification(type: "consent-revoked", sub: sub, at: Date().addingTimeInterval(-2 * 86_400)))])
        #expect(stale.status == 400)
        #expect(stale.reason == "expired")
        #expect(try await f.signIn(try f.token(person)).json["outcome"]?.stringValue == "migrated")
        let revocation = try f.notification(type: "consent-revoked", sub: sub, at: Date().addingTimeInterval(-10))
        #expect(try await f.postJSON("/v1/notifications", ["payload": .string(revocation)]).json["changed"]?.boolValue == true)
        #expect(try await f.send("GET", "/v1/credential-state", query: ["user": sub]).json["state"]?.stringValue == "revoked")
        #expect(try await f.signIn(try f.token(person)).json["outcome"]?.stringValue == "current")  // consents again
        #expect(try await f.send("GET", "/v1/credential-state", query: ["user": sub]).json["state"]?.stringValue == "authorized")
        let replayed = try await f.postJSON("/v1/notifications", ["payload": .string(revocation)])
        #expect(replayed.status == 200)
        #expect(replayed.json["changed"]?.boolValue == false)
        #expect(try await f.send("GET", "/v1/credential-state", query: ["user": sub]).json["state"]?.stringValue == "authorized")
        await f.close()
    }

    @Test("credential-state requires the service token when one is configured; NUL in a value is refused", arguments: Mode.allCases)
    func serviceToken(mode: Mode) async throws {
        let token = "service-token-0123456789"
        let f = try await ServiceFixture(mode, people: 1, serviceToken: token)
        let user = f.people[0].oldSub
        #expect(try await f.send("GET", "/v1/credential-state", query: ["user": user]).status == 401)
        #expect(try await f.send("GET", "/v1/credential-state", query: ["user": user], headers: ["Authorization": "Bearer wrong-token-0123456789"]).status == 401)
        let ok = try await f.send("GET", "/v1/credential-state", query: ["user": user], headers: ["Authorization": "bearer \(token)"])
        #expect(ok.status == 200)
        #expect(ok.json["state"]?.stringValue == "transferred")
        let nul = try await f.send("GET", "/v1/credential-state", query: ["user": user + "\u{0}x"], headers: ["Authorization": "Bearer \(token)"])
        #expect(nul.status == 400)
        #expect(nul.error == "invalid_request")
        await f.close()
    }

    @Test("the admin token: Bearer in any case; the token followed by extra bytes does not match")
    func adminBearer() async throws {
        let f = try await ServiceFixture(.inProcess, people: 1)
        #expect(try await f.send("GET", "/v1/report", headers: ["Authorization": "BEARER \(ServiceFixture.adminToken)"]).status == 200)
        let padded = ServiceFixture.adminToken + String(repeating: "\u{0}", count: 256)
        #expect(try await f.send("GET", "/v1/report", headers: ["Authorization": "Bearer \(padded)"]).status == 401)
        let longer = ServiceFixture.adminToken + String(repeating: "A", count: 256)
        #expect(try await f.send("GET", "/v1/report", headers: ["Authorization": "Bearer \(longer)"]).status == 401)
        await f.close()
    }

    @Test("notifications: string and object events, duplicates harmless, bad signature and audience refused", arguments: Mode.allCases)
    func notifications(mode: Mode) async throws {
        try await ServiceFixture.run(mode, people: 1) { f in
            let sub = try f.newSub(f.people[0])
            // Each event 10 ms after the one before: requests answer within a millisecond, and an event no later than
            // the last one applied is ignored by design.
            let start = Date()
            for (index, (type, asString, changed)) in [("email-disabled", true, true), ("email-disabled", true, false), ("email-enabled", false, true),
                                                       ("account-delete", true, true), ("account-deleted", true, false)].enumerated() {
                let payload = try f.notification(type: type, sub: sub, eventsAsString: asString, at: start + Double(index) / 100)
                let reply = try await f.postJSON("/v1/notifications", ["payload": .string(payload)])
                #expect(reply.status == 200)
                #expect(reply.json["changed"]?.boolValue == changed, "\(type)")
            }
            #expect(try TestDatabase.psql(f.url, "SELECT state || ' ' || email_enabled FROM baton.subjects WHERE sub = '\(sub)'") == "deleted true")
            #expect(try f.count("SELECT count(*) FROM baton.events WHERE kind = 'notification'") == 3)
            let wrongAudience = try await f.postJSON("/v1/notifications", ["payload": .string(try f.notification(type: "consent-revoked", sub: sub, audience: "com.other"))])
            #expect(wrongAudience.status == 400)
            #expect(wrongAudience.reason == "wrong_audience")
            // The token verifier's audience rule: an array holding anything but strings is refused, whatever else it names.
            let mixed = try f.notification(type: "consent-revoked", sub: sub, audienceClaim: .array([.number(1), .string(ServiceFixture.clientID)]))
            let mixedReply = try await f.postJSON("/v1/notifications", ["payload": .string(mixed)])
            #expect(mixedReply.status == 400 && mixedReply.reason == "invalid_claim", "\(mixedReply.json)")
            var tampered = try f.notification(type: "consent-revoked", sub: sub)
            tampered.removeLast(4)
            tampered += "AAAA"
            #expect(try await f.postJSON("/v1/notifications", ["payload": .string(tampered)]).reason == "bad_signature")
        }
    }

    @Test("bad input answers 4xx with error and reason", arguments: Mode.allCases)
    func badInput(mode: Mode) async throws {
        try await ServiceFixture.run(mode, people: 1) { f in
            let token = try f.token(f.people[0])
            let forged = token.dropLast(6) + "AAAAAA"
            let cases: [(String, String, String?, [UInt8], Int, String)] = [
                ("POST", "/v1/signin", "application/json", Array("{not json".utf8), 400, "invalid_json"),
                ("POST", "/v1/signin", "text/plain", Array(token.utf8), 415, "unsupported_media_type"),
                ("POST", "/v1/signin", "application/json", Array("{}".utf8), 400, "missing_field"),
                ("POST", "/v1/signin", "application/json", Array(#"{"id_token": 5}"#.utf8), 400, "invalid_json"),
                ("POST", "/v1/signin", "application/json", Array(#"{"id_token":"a.b.c"}"#.utf8), 401, "invalid_token"),
                ("POST", "/v1/signin", "application/json", Array("{\"id_token\":\"\(forged)\"}".utf8), 401, "invalid_token"),
                ("POST", "/v1/signin", "application/x-www-form-urlencoded", Array("id_token=%ZZ".utf8), 400, "invalid_form"),
                ("GET", "/v1/signin", nil, [], 405, "method_not_allowed"),
                ("GET", "/v1/nothing", nil, [], 404, "not_found"),
                ("POST", "/v1/notifications", "application/json", Array(#"{"payload":"x"}"#.utf8), 400, "invalid_notification"),
                ("GET", "/v1/report", nil, [], 401, "unauthorized"),
                ("GET", "/report", nil, [], 401, "unauthorized"),
            ]
            for (method, path, type, body, status, error) in cases {
                let reply = try await f.send(method, path, contentType: type, body: body)
                #expect(reply.status == status, "\(method) \(path) \(String(decoding: body.prefix(20), as: UTF8.self))")
                #expect(reply.error == error, "\(method) \(path)")
                #expect(reply.reason != nil)
            }
            let forgedReply = try await f.signIn(String(forged))
            #expect(forgedReply.reason == "bad_signature")
            #expect(try f.count("SELECT count(*) FROM baton.events") == 0)
            let report = try await f.send("GET", "/v1/report", headers: ["Authorization": "Bearer \(ServiceFixture.adminToken)"])
            #expect(report.status == 200)
            #expect(report.json["totals"]?["pending"]?.intValue == 1)
            let page = try await f.send("GET", "/report", headers: ["Authorization": "Bearer \(ServiceFixture.adminToken)"])
            #expect(page.status == 200)
            #expect(page.text.hasPrefix("<!DOCTYPE html>") || page.text.hasPrefix("<!doctype html>"))
            #expect(!page.text.contains("<script"))
            let wrongToken = try await f.send("GET", "/report", headers: ["Authorization": "Bearer not-the-token"])
            #expect(wrongToken.status == 401)
        }
    }

    @Test("an oversize body is refused with 413 by the live server")
    func oversize() async throws {
        try await ServiceFixture.run(.live, people: 1) { f in
            let reply = try await f.send("POST", "/v1/signin", contentType: "application/json",
                                         body: Array("{\"id_token\":\"\(String(repeating: "a", count: BatonServer.maxBodySize + 10))\"}".utf8))
            #expect(reply.status == 413)
            #expect(reply.error == "payload_too_large")
        }
    }

    @Test("healthz, readyz and metrics", arguments: Mode.allCases)
    func operations(mode: Mode) async throws {
        try await ServiceFixture.run(mode, people: 1) { f in
            _ = try await f.signIn(try f.token(f.people[0]))
            _ = try await f.signIn("a.b.c")
            // A report asked without the admin token is refused, but is no token rejection.
            #expect(try await f.send("GET", "/v1/report").status == 401)
            #expect(try await f.send("GET", "/healthz").json["status"]?.stringValue == "ok")
            let ready = try await f.send("GET", "/readyz")
            #expect(ready.status == 200)
            #expect(ready.json["ready"]?.boolValue == true)
            let metrics = try await f.send("GET", "/metrics")
            #expect(metrics.status == 200)
            #expect(metrics.text.contains("baton_build_info{version=\"\(BuildInfo.version)\",commit=\"\(BuildInfo.commit)\"} 1\n"))
            #expect(metrics.text.contains("baton_http_requests_total{route=\"signin\",status=\"200\"} 1"))
            #expect(metrics.text.contains("baton_signin_outcomes_total{outcome=\"migrated\"} 1"))
            #expect(metrics.text.contains("baton_rejections_total{reason=\"malformed\"} 1"))
            #expect(!metrics.text.contains("baton_rejections_total{reason=\"unauthorized\"}"), "\(metrics.text)")
            #expect(metrics.text.contains("baton_http_requests_total{route=\"report\",status=\"401\"} 1"), "\(metrics.text)")
            #expect(metrics.text.contains("baton_http_request_duration_seconds_count"))
            #expect(metrics.text.contains("baton_db_pool_connections{state=\"max\"} 4"))
            for check in ["all", "database", "keys"] { #expect(metrics.text.contains("baton_ready{check=\"\(check)\"} 1")) }
        }
    }

    @Test("metrics: the transfer's users by state, migrations by method, and the window's end")
    func transferMetrics() async throws {
        try await ServiceFixture.run(.inProcess, people: 3) { f in
            _ = try await f.signIn(try f.token(f.people[0]))
            let metrics = try await f.send("GET", "/metrics").text
            for (state, count) in [("pending", 2), ("migrated", 1), ("failed", 0), ("unresolvable", 0)] {
                #expect(metrics.contains("baton_transfer_users{state=\"\(state)\"} \(count)\n"), "\(metrics)")
            }
            for (method, count) in [("signin", 1), ("exchange", 0), ("link", 0)] {
                #expect(metrics.contains("baton_transfer_migrated_total{method=\"\(method)\"} \(count)\n"), "\(metrics)")
            }
            #expect(metrics.contains("# TYPE baton_transfer_migrated_total counter\n"))
            let end = try #require(f.engine.transferAcceptedAt).addingTimeInterval(60 * 86_400)
            #expect(metrics.contains("baton_transfer_window_end_timestamp_seconds \(Int(end.timeIntervalSince1970))\n"), "\(metrics)")
            // The scrape folded the sign-in's delta into the summary: the next one reads the summary alone.
            let url = f.url
            #expect(try await offPool { try TestDatabase.psql(url, "SELECT count(*) FROM baton.transfer_count_deltas") } == "0")
        }
        try await ServiceFixture.run(.inProcess, people: 1, acceptTransfer: false) { f in
            let metrics = try await f.send("GET", "/metrics").text
            #expect(metrics.contains("baton_transfer_users{state=\"pending\"} 1\n"), "\(metrics)")
            #expect(!metrics.contains("baton_transfer_window_end_timestamp_seconds"), "before acceptance: \(metrics)")
        }
    }
}

/// Calls ``BatonEngine/signIn(idToken:nonce:on:)`` on `loop`'s thread once `pool`'s pipeline there is
/// connected, and follows the steps it starts on the loop to what they come to: a result (`.now`) or async work.
func signInOnLoop(_ engine: BatonEngine, _ token: String, nonce: ExpectedNonce? = nil, loop: EventLoop,
                          pool: PostgresPool) async throws -> NowOrLater<SignInResult> {
    let outcome: Result<NowOrLater<SignInResult>, any Error> = await withCheckedContinuation { continuation in
        @Sendable func follow(_ step: Result<NowOrLater<SignInResult>, any Error>) {
            guard case .success(.soon(let start)) = step else { return continuation.resume(returning: step) }
            start { follow($0) }
        }
        @Sendable func attempt(_ tries: Int) {
            loop.execute {
                guard pool.pipeline(on: loop)?.isReady == true || tries > 300 else {
                    DispatchQueue.global().asyncAfter(deadline: .now() + .milliseconds(10)) { attempt(tries + 1) }
                    return
                }
                let step = Result { try engine.signIn(idToken: token, nonce: nonce, on: loop) }
                guard case .success(.soon) = step else {
                    return continuation.resume(returning: .failure(CancellationError()))
                }
                follow(step)
            }
        }
        attempt(0)
    }
    return try outcome.get()
}
