import Baton
import Foundation
import BatonPostgres
import TestSupport
import Testing

@Suite("LegacyStore: the migration rules on PostgreSQL", .serialized)
struct LegacyStoreTests {
    @Test("a migration rewrites the subject, replaces a relay email, marks the transfer and appends one event")
    func migrates() async throws {
        let f = try await StoreFixture("store_migrate")
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
        await f.pool.close()
    }

    @Test("a real email is kept; a transfer row is created when the mapping came from the legacy column")
    func keepsRealEmail() async throws {
        let f = try await StoreFixture("store_realmail")
        let key = try await f.addUser(sub: "old.2", email: "ann@example.com", transferSub: "t.2")
        #expect(try await f.store.oldSubject(forTransferSubject: "t.2") == "old.2")
        let outcome = try await f.store.applyMigration(oldSub: "old.2", newSub: "new.2", newEmail: "q@privaterelay.appleid.com",
                                                       isPrivateEmail: true, transferSub: "t.2", method: .exchange)
        #expect(outcome == .migrated(LegacyUser(key: key, subject: "new.2", email: "ann@example.com")))
        #expect(try TestDatabase.psql(f.url, "SELECT state || ' ' || method || ' ' || transfer_sub FROM baton.transfers WHERE old_sub = 'old.2'")
                == "migrated exchange t.2")
        await f.pool.close()
    }

    @Test("a relay email with no new email is kept")
    func relayWithoutNewEmail() async throws {
        let f = try await StoreFixture("store_noemail")
        let key = try await f.addUser(sub: "old.3", email: "r@PrivateRelay.AppleID.com")
        let outcome = try await f.store.applyMigration(oldSub: "old.3", newSub: "new.3", newEmail: nil,
                                                       isPrivateEmail: nil, transferSub: nil, method: .link)
        #expect(outcome == .migrated(LegacyUser(key: key, subject: "new.3", email: "r@PrivateRelay.AppleID.com")))
        await f.pool.close()
    }

    @Test("a second call is alreadyMigrated and writes nothing; a missing record is legacyRecordMissing")
    func idempotent() async throws {
        let f = try await StoreFixture("store_again")
        let key = try await f.addUser(sub: "old.4", email: nil)
        _ = try await f.store.applyMigration(oldSub: "old.4", newSub: "new.4", newEmail: nil, isPrivateEmail: nil, transferSub: "t.4", method: .signin)
        let again = try await f.store.applyMigration(oldSub: "old.4", newSub: "new.4", newEmail: nil, isPrivateEmail: nil, transferSub: "t.4", method: .signin)
        #expect(again == .alreadyMigrated(LegacyUser(key: key, subject: "new.4", email: nil)))
        #expect(try f.count("SELECT count(*) FROM baton.events") == 1)
        let missing = try await f.store.applyMigration(oldSub: "nobody", newSub: "new.x", newEmail: nil, isPrivateEmail: nil, transferSub: nil, method: .signin)
        #expect(missing == .legacyRecordMissing)
        #expect(try f.count("SELECT count(*) FROM baton.events") == 1)
        await f.pool.close()
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
        let f = try await StoreFixture("store_race", poolSize: 16)
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
        await f.pool.close()
    }

    @Test("migration by transfer identifier: through baton.transfers, through the legacy column, unknown")
    func migrateByTransfer() async throws {
        let f = try await StoreFixture("store_bytransfer")
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
        await f.pool.close()
    }

    @Test("transfer lookups: baton.transfers first, then the legacy transfer column; unknown is nil")
    func transferLookup() async throws {
        let f = try await StoreFixture("store_lookup")
        try await f.addUser(sub: "old.6", email: nil, transferSub: "t.col")
        try await f.addTransfer(oldSub: "old.7", transferSub: "t.tab")
        #expect(try await f.store.oldSubject(forTransferSubject: "t.tab") == "old.7")
        #expect(try await f.store.oldSubject(forTransferSubject: "t.col") == "old.6")
        #expect(try await f.store.oldSubject(forTransferSubject: "t.none") == nil)
        #expect(try await f.store.lookupBySubject("old.6")?.subject == "old.6")
        #expect(try await f.store.lookupBySubject("nobody") == nil)
        await f.pool.close()
    }

    @Test("credential states: authorized, transferred (migrated or not), revoked, not_found")
    func credentialStates() async throws {
        let f = try await StoreFixture("store_state")
        try await f.addUser(sub: "cur", email: nil)
        try await f.addUser(sub: "pending.old", email: nil)
        try await f.addTransfer(oldSub: "pending.old", transferSub: "t.p")
        try await f.addUser(sub: "col.old", email: nil, transferSub: "t.c")
        try await f.addUser(sub: "mig.old", email: nil)
        _ = try await f.store.applyMigration(oldSub: "mig.old", newSub: "mig.new", newEmail: nil, isPrivateEmail: nil, transferSub: "t.m", method: .signin)
        try await f.addUser(sub: "gone", email: nil)
        #expect(try await f.store.applyNotification(.consentRevoked, subject: "gone"))
        let cases: [(String, CredentialState)] = [
            ("cur", .authorized), ("pending.old", .transferred), ("col.old", .transferred), ("mig.old", .transferred),
            ("mig.new", .authorized), ("gone", .revoked), ("nobody", .notFound),
        ]
        for (sub, state) in cases {
            #expect(try await f.store.credentialState(of: sub) == state, "\(sub)")
        }
        try await f.store.restoreAuthorization(subject: "gone")
        #expect(try await f.store.credentialState(of: "gone") == .authorized)
        await f.pool.close()
    }

    @Test("notifications: duplicates change nothing and append no event")
    func notifications() async throws {
        let f = try await StoreFixture("store_notify")
        #expect(try await f.store.applyNotification(.emailDisabled, subject: "s1"))
        #expect(try await f.store.applyNotification(.emailDisabled, subject: "s1") == false)
        #expect(try await f.store.applyNotification(.emailEnabled, subject: "s1"))
        #expect(try await f.store.applyNotification(.accountDelete, subject: "s1"))
        #expect(try await f.store.applyNotification(.accountDeleted, subject: "s1") == false)
        #expect(try TestDatabase.psql(f.url, "SELECT state || ' ' || email_enabled FROM baton.subjects") == "deleted true")
        #expect(try f.count("SELECT count(*) FROM baton.events WHERE kind = 'notification'") == 3)
        await f.pool.close()
    }

    @Test("a nonce is accepted once until it expires")
    func nonces() async throws {
        let f = try await StoreFixture("store_nonce")
        let later = Date().addingTimeInterval(600)
        #expect(try await f.store.consumeNonce("n-1", expiresAt: later))
        #expect(try await f.store.consumeNonce("n-1", expiresAt: later) == false)
        #expect(try await f.store.consumeNonce("n-2", expiresAt: Date().addingTimeInterval(-1)))
        #expect(try await f.store.consumeNonce("n-2", expiresAt: later))
        await f.pool.close()
    }

    @Test("an email Apple changed is updated with an event; an unchanged one writes nothing")
    func emailUpdate() async throws {
        let f = try await StoreFixture("store_email")
        let key = try await f.addUser(sub: "e1", email: "a@privaterelay.appleid.com")
        let user = LegacyUser(key: key, subject: "e1", email: "a@privaterelay.appleid.com")
        #expect(try await f.store.updateEmail(of: user, to: "a@privaterelay.appleid.com") == user)
        #expect(try f.count("SELECT count(*) FROM baton.events") == 0)
        let changed = try await f.store.updateEmail(of: user, to: "b@privaterelay.appleid.com")
        #expect(changed?.email == "b@privaterelay.appleid.com")
        #expect(try f.count("SELECT count(*) FROM baton.events WHERE kind = 'email_changed'") == 1)
        await f.pool.close()
    }
}
