import BatonAppleSignIn
import Baton
import Foundation
import BatonPostgres
import TestSupport
import Testing

@Suite("LegacyStore: the migration rules on PostgreSQL", .serialized)
struct LegacyStoreTests {
    @Test("a migration rewrites the subject, replaces a relay email, marks the transfer and appends one event")
    func migrates() async throws {
        try await StoreFixture.run("store_migrate") { f in
            let key = try await f.addUser(sub: "old.1", email: "abc@privaterelay.appleid.com")
            try await f.addTransfer(oldSub: "old.1", transferSub: "t.1")
            let outcome = try await f.store.applyMigration(oldSub: "old.1", newSub: "new.1", newEmail: "xyz@privaterelay.appleid.com",
                                                           isPrivateEmail: true, transferSub: "t.1", method: .signin)
            #expect(outcome == .migrated(LegacyUser(key: key, subject: "new.1", email: "xyz@privaterelay.appleid.com")))
            #expect(try TestDatabase.psql(f.url, "SELECT apple_sub || ' ' || email FROM users") == "new.1 xyz@privaterelay.appleid.com")
            #expect(try TestDatabase.psql(f.url, "SELECT state || ' ' || method || ' ' || new_sub || ' ' || transfer_sub || ' ' || is_private_email FROM baton.transfers")
                    == "migrated signin new.1 t.1 true")
            #expect(try TestDatabase.psql(f.url, "SELECT kind || ' ' || method || ' ' || legacy_key || ' ' || old_sub || ' ' || new_sub || ' ' || old_email || ' ' || new_email FROM baton.events")
                    == "migrated signin \(key) old.1 new.1 abc@privaterelay.appleid.com xyz@privaterelay.appleid.com")
        }
    }

    @Test("a real email is kept; a transfer row is created when the mapping came from the legacy column")
    func keepsRealEmail() async throws {
        try await StoreFixture.run("store_realmail") { f in
            let key = try await f.addUser(sub: "old.2", email: "ann@example.com", transferSub: "t.2")
            #expect(try await f.store.oldSubject(forTransferSubject: "t.2") == "old.2")
            let outcome = try await f.store.applyMigration(oldSub: "old.2", newSub: "new.2", newEmail: "q@privaterelay.appleid.com",
                                                           isPrivateEmail: true, transferSub: "t.2", method: .exchange)
            #expect(outcome == .migrated(LegacyUser(key: key, subject: "new.2", email: "ann@example.com")))
            #expect(try TestDatabase.psql(f.url, "SELECT state || ' ' || method || ' ' || transfer_sub FROM baton.transfers WHERE old_sub = 'old.2'")
                    == "migrated exchange t.2")
        }
    }

    @Test("a relay email with no new email is kept")
    func relayWithoutNewEmail() async throws {
        try await StoreFixture.run("store_noemail") { f in
            let key = try await f.addUser(sub: "old.3", email: "r@PrivateRelay.AppleID.com")
            let outcome = try await f.store.applyMigration(oldSub: "old.3", newSub: "new.3", newEmail: nil,
                                                           isPrivateEmail: nil, transferSub: nil, method: .link)
            #expect(outcome == .migrated(LegacyUser(key: key, subject: "new.3", email: "r@PrivateRelay.AppleID.com")))
        }
    }

    @Test("a second call is alreadyMigrated and writes nothing; a missing record is legacyRecordMissing")
    func idempotent() async throws {
        try await StoreFixture.run("store_again") { f in
            let key = try await f.addUser(sub: "old.4", email: nil)
            _ = try await f.store.applyMigration(oldSub: "old.4", newSub: "new.4", newEmail: nil, isPrivateEmail: nil, transferSub: "t.4", method: .signin)
            let again = try await f.store.applyMigration(oldSub: "old.4", newSub: "new.4", newEmail: nil, isPrivateEmail: nil, transferSub: "t.4", method: .signin)
            #expect(again == .alreadyMigrated(LegacyUser(key: key, subject: "new.4", email: nil)))
            #expect(try f.count("SELECT count(*) FROM baton.events") == 1)
            let missing = try await f.store.applyMigration(oldSub: "nobody", newSub: "new.x", newEmail: nil, isPrivateEmail: nil, transferSub: nil, method: .signin)
            #expect(missing == .legacyRecordMissing)
            #expect(try f.count("SELECT count(*) FROM baton.events") == 1)
        }
    }

    @Test("a new identifier that belongs to another record is a conflict: nothing changes, one event names both keys")
    func conflict() async throws {
        let f = try await StoreFixture("store_conflict")
        try await f.addUser(sub: "old.5", email: nil)
        try await f.addUser(sub: "new.5", email: nil)
        let outcome = try await f.store.applyMigration(oldSub: "old.5", newSub: "new.5", newEmail: nil, isPrivateEmail: nil, transferSub: nil, method: .link)
        #expect(outcome == .conflict)
        #expect(try f.count("SELECT count(*) FROM users WHERE apple_sub IN ('old.5', 'new.5')") == 2)
        #expect(try f.count("SELECT count(*) FROM baton.events") == 1)
        #expect(try f.count("""
            SELECT count(*) FROM baton.events e JOIN users o ON o.id::text = e.legacy_key AND o.apple_sub = 'old.5'
            JOIN users n ON n.id::text = e.detail->>'holder_key' AND n.apple_sub = 'new.5'
            WHERE e.kind = 'subject_conflict' AND e.old_sub = 'old.5' AND e.new_sub = 'new.5'
            """) == 1)
        #expect(try f.count("SELECT count(*) FROM baton.transfers") == 0)
        await f.pool.close()
    }

    @Test("50 users × 8 concurrent callers: 50 rewrites, 50 events, every caller sees the same record")
    func concurrent() async throws {
        try await StoreFixture.run("store_race", poolSize: 16) { f in
            var keys: [String: String] = [:]
            for index in 0..<50 {
                keys["old.\(index)"] = try await f.addUser(sub: "old.\(index)", email: "u\(index)@privaterelay.appleid.com")
                try await f.addTransfer(oldSub: "old.\(index)", transferSub: "t.\(index)")
            }
            let store = f.store
            let outcomes = try await withThrowingTaskGroup(of: (Int, MigrationOutcome).self) { group in
                for index in 0..<50 {
                    for _ in 0..<8 {
                        group.addTask {
                            (index, try await store.applyMigration(oldSub: "old.\(index)", newSub: "new.\(index)", newEmail: "n\(index)@privaterelay.appleid.com",
                                                                   isPrivateEmail: true, transferSub: "t.\(index)", method: .signin))
                        }
                    }
                }
                return try await group.reduce(into: [(Int, MigrationOutcome)]()) { $0.append($1) }
            }
            #expect(outcomes.count == 400)
            var migrated = 0
            for (index, outcome) in outcomes {
                let expected = LegacyUser(key: keys["old.\(index)"]!, subject: "new.\(index)", email: "n\(index)@privaterelay.appleid.com")
                switch outcome {
                case .migrated(let user): migrated += 1; #expect(user == expected)
                case .alreadyMigrated(let user): #expect(user == expected)
                default: Issue.record("unexpected outcome \(outcome)")
                }
            }
            #expect(migrated == 50)
            #expect(try f.count("SELECT count(*) FROM baton.events WHERE kind = 'migrated'") == 50)
            #expect(try f.count("SELECT count(*) FROM baton.transfers WHERE state = 'migrated'") == 50)
        }
    }

    @Test("migration by transfer identifier: through baton.transfers, through the legacy column, unknown")
    func migrateByTransfer() async throws {
        try await StoreFixture.run("store_bytransfer") { f in
            let k1 = try await f.addUser(sub: "old.8", email: "a@privaterelay.appleid.com")
            try await f.addTransfer(oldSub: "old.8", transferSub: "t.8")
            let k2 = try await f.addUser(sub: "old.9", email: nil, transferSub: "t.9")
            #expect(try await f.store.applyMigration(transferSub: "t.8", newSub: "new.8", newEmail: "b@privaterelay.appleid.com", isPrivateEmail: true, method: .signin)
                    == .migrated(LegacyUser(key: k1, subject: "new.8", email: "b@privaterelay.appleid.com")))
            #expect(try await f.store.applyMigration(transferSub: "t.9", newSub: "new.9", newEmail: nil, isPrivateEmail: nil, method: .signin)
                    == .migrated(LegacyUser(key: k2, subject: "new.9", email: nil)))
            #expect(try await f.store.applyMigration(transferSub: "t.8", newSub: "new.8", newEmail: nil, isPrivateEmail: nil, method: .signin)
                    == .alreadyMigrated(LegacyUser(key: k1, subject: "new.8", email: "b@privaterelay.appleid.com")))
            #expect(try await f.store.applyMigration(transferSub: "t.none", newSub: "new.x", newEmail: nil, isPrivateEmail: nil, method: .signin)
                    == .legacyRecordMissing)
            #expect(try TestDatabase.psql(f.url, "SELECT string_agg(old_sub || '>' || new_sub, ',' ORDER BY old_sub) FROM baton.events") == "old.8>new.8,old.9>new.9")
            #expect(try TestDatabase.psql(f.url, "SELECT transfer_sub FROM baton.transfers WHERE old_sub = 'old.9'") == "t.9")
        }
    }

    @Test("transfer lookups: baton.transfers first, then the legacy transfer column; unknown is nil")
    func transferLookup() async throws {
        try await StoreFixture.run("store_lookup") { f in
            try await f.addUser(sub: "old.6", email: nil, transferSub: "t.col")
            try await f.addTransfer(oldSub: "old.7", transferSub: "t.tab")
            #expect(try await f.store.oldSubject(forTransferSubject: "t.tab") == "old.7")
            #expect(try await f.store.oldSubject(forTransferSubject: "t.col") == "old.6")
            #expect(try await f.store.oldSubject(forTransferSubject: "t.none") == nil)
            #expect(try await f.store.lookupBySubject("old.6")?.subject == "old.6")
            #expect(try await f.store.lookupBySubject("nobody") == nil)
        }
    }

    @Test("notifications: duplicates change nothing and append no event")
    func notifications() async throws {
        let f = try await StoreFixture("store_notify")
        let start = Date().addingTimeInterval(-100)
        #expect(try await f.store.applyNotification(.emailDisabled, subject: "s1", eventTime: start))
        #expect(try await f.store.applyNotification(.emailDisabled, subject: "s1", eventTime: start + 1) == false)
        #expect(try await f.store.applyNotification(.emailEnabled, subject: "s1", eventTime: start + 2))
        #expect(try await f.store.applyNotification(.accountDelete, subject: "s1", eventTime: start + 3))
        #expect(try await f.store.applyNotification(.accountDeleted, subject: "s1", eventTime: start + 4) == false)
        #expect(try TestDatabase.psql(f.url, "SELECT state || ' ' || email_enabled FROM baton.subjects") == "deleted true")
        #expect(try f.count("SELECT count(*) FROM baton.events WHERE kind = 'notification'") == 3)
        await f.pool.close()
    }

    @Test("notifications apply in event order: a replayed or late revocation does not undo a later sign-in")
    func notificationOrder() async throws {
        let f = try await StoreFixture("store_notify_order")
        try await f.addUser(sub: "s1", email: nil)
        let revokedAt = Date().addingTimeInterval(-60)
        #expect(try await f.store.applyNotification(.consentRevoked, subject: "s1", eventTime: revokedAt))
        try await f.store.restoreAuthorization(subject: "s1")  // the user signed in again
        #expect(try await f.store.applyNotification(.consentRevoked, subject: "s1", eventTime: revokedAt) == false)
        #expect(try await f.store.applyNotification(.consentRevoked, subject: "s1", eventTime: revokedAt - 30) == false)
        #expect(CredentialState(try await f.store.credentialFacts(of: "s1"), transferAccepted: true) == .authorized)
        #expect(try await f.store.applyNotification(.consentRevoked, subject: "s1", eventTime: Date().addingTimeInterval(5)))
        #expect(CredentialState(try await f.store.credentialFacts(of: "s1"), transferAccepted: true) == .revoked)
        await f.pool.close()
    }

    @Test("a nonce is accepted once per subject until it expires on the application's clock; a released one is accepted again")
    func nonces() async throws {
        let f = try await StoreFixture("store_nonce")
        let now = Date()
        let later = now.addingTimeInterval(600)
        // Each use is another request's attempt unless one is named.
        func use(_ nonce: String, _ sub: String, until: Date = later, attempt: String = UUID().uuidString) -> NonceUse {
            NonceUse(nonce: nonce, subject: sub, expiresAt: until, attempt: attempt)
        }
        let first = use("n-1", "a")
        #expect(try await f.store.consumeNonce(first, now: now))
        #expect(try await f.store.consumeNonce(use("n-1", "a"), now: now) == false)
        #expect(try await f.store.consumeNonce(use("n-1", "b"), now: now))
        #expect(try await f.store.consumeNonce(use("n-2", "a", until: now.addingTimeInterval(-1)), now: now))
        #expect(try await f.store.consumeNonce(use("n-2", "a"), now: now))
        try await f.store.releaseNonce(use("n-1", "a"))  // another attempt's release leaves the use in place
        #expect(try await f.store.consumeNonce(use("n-1", "a"), now: now) == false)
        try await f.store.releaseNonce(first)
        #expect(try await f.store.consumeNonce(use("n-1", "a"), now: now))
        // Expiry is compared with the application's clock, whatever PostgreSQL's says: a nonce kept until `later`
        // is still refused at `later` - 1 s, even if the database clock were past it.
        #expect(try await f.store.consumeNonce(use("n-3", "a"), now: now))
        #expect(try await f.store.consumeNonce(use("n-3", "a"), now: later.addingTimeInterval(-1)) == false)
        #expect(try await f.store.consumeNonce(use("n-3", "a"), now: later.addingTimeInterval(1)))
        await f.pool.close()
    }

    @Test("the attempt that used a nonce or a link session up gets true again when it repeats the statement (its answer lost with the connection); any other attempt is refused")
    func repeatedAttempt() async throws {
        try await StoreFixture.run("store_attempt") { f in
            let now = Date()
            let attempt = NonceUse(nonce: "n-1", subject: "a", expiresAt: now.addingTimeInterval(600), attempt: "attempt-1")
            #expect(try await f.store.consumeNonce(attempt, now: now))
            #expect(try await f.store.consumeNonce(attempt, now: now))
            var replay = attempt
            replay.attempt = "attempt-2"
            #expect(try await f.store.consumeNonce(replay, now: now) == false)
            #expect(try await f.store.consumeNonce(attempt, now: now))  // the replay did not take the nonce over
            #expect(try f.count("SELECT count(*) FROM baton.nonces WHERE sub = 'a' AND nonce = 'n-1' AND attempt = 'attempt-1'") == 1)

            let opened = try await f.store.createLinkSession(nonceHash: "h-1", expiresAt: now.addingTimeInterval(600), attempt: "open-1", now: now, maxLive: 10)
            #expect(opened)
            #expect(try await f.store.consumeLinkSession(nonceHash: "h-1", attempt: "link-1", now: now))
            #expect(try await f.store.consumeLinkSession(nonceHash: "h-1", attempt: "link-1", now: now.addingTimeInterval(1)))
            #expect(try await f.store.consumeLinkSession(nonceHash: "h-1", attempt: "link-2", now: now) == false)
            #expect(try await f.store.consumeLinkSession(nonceHash: "h-unknown", attempt: "link-1", now: now) == false)
            #expect(try await f.store.createLinkSession(nonceHash: "h-2", expiresAt: now.addingTimeInterval(-1), attempt: "open-2", now: now, maxLive: 10))
            #expect(try await f.store.consumeLinkSession(nonceHash: "h-2", attempt: "link-3", now: now) == false)
        }
    }

    @Test("a value the application's table refuses (too long, a CHECK, a JSON copy that is not JSON) never keeps a user from migrating: the subject is rewritten, the rest kept as it was, and the event says why")
    func refusedValues() async throws {
        let f = try await StoreFixture("store_refused")
        try await f.pool.withConnection { connection in
            try await connection.executeScript(unsafeSQL: """
                CREATE TABLE public.narrow (
                    id bigserial PRIMARY KEY, apple_sub text UNIQUE,
                    email varchar(30) CHECK (email <> 'no@privaterelay.appleid.com'), claims text);
                INSERT INTO public.narrow (apple_sub, email, claims) VALUES
                    ('old.long', 'a@privaterelay.appleid.com', '{"sub": "old.long"}'),
                    ('old.check', 'b@privaterelay.appleid.com', '{"sub": "old.check"}'),
                    ('old.json', 'c@privaterelay.appleid.com', 'not json at all'),
                    ('old.fine', 'd@privaterelay.appleid.com', '{"sub": "old.fine", "email": "d@privaterelay.appleid.com"}');
                """)
        }
        let legacy = BatonConfiguration.Legacy(table: "public.narrow", keyColumn: "id", subjectColumn: "apple_sub", emailColumn: "email",
                                               json: LegacyJSONCopy(column: "claims", subjectKeys: ["sub"], emailKeys: ["email"]))
        let store = LegacyStore(pool: f.pool, legacy: try legacy.identifiers())
        let before = try TestDatabase.psql(f.url, "SELECT string_agg(id || '|' || email || '|' || claims, ';' ORDER BY id) FROM public.narrow WHERE apple_sub = 'old.json'")
        let cases: [(old: String, email: String, sqlState: String)] = [
            ("old.long", "a-much-longer-address@privaterelay.appleid.com", "22001"),
            ("old.check", "no@privaterelay.appleid.com", "23514"),
            ("old.json", "c2@privaterelay.appleid.com", "22P02"),
        ]
        for (old, email, sqlState) in cases {
            let outcome = try await store.applyMigration(oldSub: old, newSub: "new" + old.dropFirst(3), newEmail: email, isPrivateEmail: true,
                                                         transferSub: nil, method: .exchange)
            guard case .migrated(let user) = outcome else {
                Issue.record("\(old): \(outcome)")
                continue
            }
            #expect(user.subject == "new" + old.dropFirst(3))
            #expect(user.email != email, "\(old): the refused email is not written")
            #expect(try f.count("SELECT count(*) FROM baton.events WHERE kind = 'email_conflict' AND old_sub = '\(old)' AND detail->>'sqlstate' = '\(sqlState)'") == 1)
        }
        // The JSON copy that is not JSON is left exactly as it was, and so is the email.
        #expect(try TestDatabase.psql(f.url, "SELECT string_agg(id || '|' || email || '|' || claims, ';' ORDER BY id) FROM public.narrow WHERE apple_sub = 'new.json'") == before)
        #expect(try f.count("SELECT count(*) FROM baton.events WHERE kind = 'email_conflict' AND detail->>'json_written' = 'false'") == 1)
        // A row whose values fit is rewritten whole.
        guard case .migrated(let fine) = try await store.applyMigration(oldSub: "old.fine", newSub: "new.fine", newEmail: "d2@privaterelay.appleid.com",
                                                                        isPrivateEmail: true, transferSub: nil, method: .exchange) else {
            Issue.record("old.fine did not migrate")
            return
        }
        #expect(fine.email == "d2@privaterelay.appleid.com")
        #expect(try TestDatabase.psql(f.url, "SELECT claims::jsonb->>'email' FROM public.narrow WHERE apple_sub = 'new.fine'") == "d2@privaterelay.appleid.com")
        await f.pool.close()
    }

    @Test("re-linking accepts only a sending-team identifier still waiting (or a repeat of its own link)")
    func linkable() async throws {
        let f = try await StoreFixture("store_linkable")
        try await f.addUser(sub: "pending.old", email: nil)
        try await f.addTransfer(oldSub: "pending.old", transferSub: "t.p")
        try await f.addUser(sub: "plain.old", email: nil)
        try await f.addUser(sub: "mig.old", email: nil)
        _ = try await f.store.applyMigration(oldSub: "mig.old", newSub: "mig.new", newEmail: nil, isPrivateEmail: nil, transferSub: nil, method: .signin)
        let cases: [(String, String, Bool)] = [
            ("pending.old", "x.new", true), ("plain.old", "x.new", true), ("mig.old", "mig.new", true),
            ("mig.old", "x.new", false), ("mig.new", "x.new", false), ("nobody", "x.new", false),
        ]
        for (legacy, current, expected) in cases {
            #expect(try await f.store.linkableSubject(legacySubject: legacy, currentSubject: current) == (expected ? legacy : nil), "\(legacy) → \(current)")
        }
        await f.pool.close()
    }

    @Test("an email Apple changed is updated with an event; an unchanged one writes nothing")
    func emailUpdate() async throws {
        try await StoreFixture.run("store_email") { f in
            let key = try await f.addUser(sub: "e1", email: "a@privaterelay.appleid.com")
            let user = LegacyUser(key: key, subject: "e1", email: "a@privaterelay.appleid.com")
            #expect(try await f.store.updateEmail(of: user, to: "a@privaterelay.appleid.com") == user)
            #expect(try f.count("SELECT count(*) FROM baton.events") == 0)
            let changed = try await f.store.updateEmail(of: user, to: "b@privaterelay.appleid.com")
            #expect(changed?.email == "b@privaterelay.appleid.com")
            #expect(try f.count("SELECT count(*) FROM baton.events WHERE kind = 'email_changed'") == 1)
        }
    }
}
