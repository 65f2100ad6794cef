import BatonEmulator
import BatonAppleSignIn
@testable import Baton
@testable import BatonJobs
import Foundation
import BatonPostgres
import Synchronization
import TestSupport
import Testing

@Suite("Bulk jobs against the emulator and PostgreSQL", .serialized)
struct BulkJobTests {
    @Test("the exchange migrates every pending user once, with one event each and method exchange")
    func exchangesEveryone() async throws {
        try await BulkJobFixture.run(users: 60) { fixture in
            let job = try fixture.exchangeJob(options: BulkJobOptions(workers: 6, rate: 500))
            let summary = await job.run()
            #expect(summary.stopReason == nil)
            #expect(summary.counts.succeeded == 60)
            #expect(summary.remaining == 0)
            #expect(try fixture.count("SELECT count(*) FROM baton.transfers WHERE state = 'migrated' AND method = 'exchange'") == 60)
            #expect(try fixture.count("SELECT count(*) FROM baton.events WHERE kind = 'migrated' AND method = 'exchange'") == 60)
            #expect(try fixture.count("SELECT count(*) FROM public.users u JOIN baton.transfers t ON t.new_sub = u.apple_sub") == 60)
            // A rerun finds nothing to do.
            let again = try await fixture.exchangeJob(options: BulkJobOptions(workers: 2, rate: 500)).run()
            #expect(again.counts.requests == 0 && again.remaining == 0)
        }
    }

    @Test("a storm of 429s: the job waits as told, lowers its rate, and still migrates everyone")
    func rateLimitStorm() async throws {
        try await BulkJobFixture.run(users: 30) { fixture in
            // Apple allows 5/s (a bucket of 5); the job starts at 200/s.
            try fixture.emulator.setFaults(EmulatorFaults(rateLimitPerSecond: 5))
            let job = try fixture.exchangeJob(options: BulkJobOptions(workers: 4, rate: 200))
            let summary = await job.run()
            #expect(summary.stopReason == nil)
            #expect(summary.counts.succeeded == 30)
            #expect(summary.counts.rateLimited > 0)
            #expect(summary.finalRate < 200)
            #expect(try fixture.count("SELECT count(*) FROM baton.events WHERE kind = 'migrated'") == 30)
        }
    }

    @Test("a storm of 5xx: retried with backoff, everyone migrated, no event twice")
    func serverErrorStorm() async throws {
        try await BulkJobFixture.run(users: 40) { fixture in
            try fixture.emulator.setFaults(EmulatorFaults(errorRate: 0.4, errorStatus: 503))
            let options = BulkJobOptions(workers: 4, rate: 500, maxConsecutiveFailures: 1000, retryDelay: 0.01, maxRetryDelay: 0.05)
            let job = try fixture.exchangeJob(options: options)
            let summary = await job.run()
            #expect(summary.stopReason == nil)
            #expect(summary.counts.succeeded == 40)
            #expect(summary.counts.requests > 40)
            #expect(try fixture.count("SELECT count(*) FROM baton.events WHERE kind = 'migrated'") == 40)
            #expect(try fixture.count("SELECT count(*) FROM baton.transfers WHERE state <> 'migrated'") == 0)
        }
    }

    @Test("users refused one after the other: the job stops after the consecutive-failure limit with a clear reason")
    func stopsAfterConsecutiveFailures() async throws {
        try await BulkJobFixture.run(users: 30) { fixture in
            for user in fixture.users {
                try fixture.emulator.revoke(clientID: BulkJobFixture.clientID, userIdentifier: user.userIdentifier)
            }
            let summary = try await fixture.exchangeJob(options: BulkJobOptions(workers: 1, rate: 500, maxConsecutiveFailures: 5)).run()
            #expect(summary.stopReason?.code == .stopped)
            #expect(summary.stopReason?.reason.contains("5 consecutive failures") == true, "\(String(describing: summary.stopReason))")
            #expect(summary.remaining == 25)
            #expect(try fixture.count("SELECT count(*) FROM baton.events WHERE kind = 'migrated'") == 0)
            #expect(try fixture.count("SELECT count(*) FROM baton.transfers WHERE lease_owner IS NOT NULL") == 0)
        }
    }

    /// Options that back off in milliseconds, so an outage of many failed requests passes quickly.
    static func quickBackoff(workers: Int = 4, maxOutageSeconds: Double = 3_600) -> BulkJobOptions {
        BulkJobOptions(workers: workers, rate: 2_000, retryDelay: 0.001, maxRetryDelay: 0.01, maxOutageSeconds: maxOutageSeconds)
    }

    /// Requests the emulator received on `/auth/*`, answered or not.
    static func appleCalls(_ emulator: AppleEmulator) -> Int {
        emulator.stats().endpoints.values.reduce(0) { $0 + $1.calls }
    }

    @Test("Apple failing every request for far longer than the 10 identical failures that used to stop the job: paused, then every user exchanged once, nobody failed")
    func outagePausesThenResumes() async throws {
        try await BulkJobFixture.run(users: 30) { fixture in
            let emulator = fixture.emulator
            try emulator.setFaults(EmulatorFaults(errorRate: 1, errorStatus: 503))
            // Through the entry point the commands use, so the progress lines are the operator's.
            let run = try BulkRun(queue: TransferQueue(pool: fixture.database.pool, kind: .exchange), work: .exchange(applier: fixture.database.store),
                                  client: try fixture.client(fixture.recipient), options: Self.quickBackoff(),
                                  window: TransferWindow(acceptedAt: fixture.acceptedAt))
            let job = run.job
            let lines = LinesBox()
            // Apple comes back once it has refused 200 requests (every worker many times over) and a progress line
            // has shown the pause.
            let watcher = Task { () -> BulkJobPause? in
                while Self.appleCalls(emulator) < 200 || job.pause == nil || !lines.all.contains(where: { $0.contains("paused=apple_unreachable") }) {
                    try await Task.sleep(for: .milliseconds(2))
                }
                let pause = job.pause
                try emulator.setFaults(EmulatorFaults())
                return pause
            }
            let summary = await run.run(total: 30, isTerminal: false, logInterval: 0.01, write: { lines.append($0) })
            let pause = try await watcher.value
            #expect(pause?.limit == 3_600)
            #expect(job.pause == nil)
            #expect(lines.all.contains { $0.contains(" paused=apple_unreachable paused_s=") && $0.contains(" pause_limit_s=3600") })
            #expect(summary.stopReason == nil, "\(String(describing: summary.stopReason))")
            #expect(summary.counts.succeeded == 30)
            #expect(summary.counts.failed == 0 && summary.counts.unresolvable == 0)
            #expect(summary.remaining == 0)
            #expect(try fixture.count("SELECT count(*) FROM baton.events WHERE kind = 'migrated' AND method = 'exchange'") == 30)
            #expect(try fixture.count("SELECT count(*) FROM (SELECT old_sub FROM baton.events GROUP BY old_sub HAVING count(*) > 1) d") == 0)
            #expect(try fixture.count("SELECT count(*) FROM baton.transfers WHERE state <> 'migrated' OR last_error IS NOT NULL") == 0)
        }
    }

    @Test("Apple unreachable past the outage limit: the job stops with apple_unreachable, every user still pending and unmarked; a rerun finishes")
    func outageLimitStops() async throws {
        try await BulkJobFixture.run(users: 30) { fixture in
            try fixture.emulator.setFaults(EmulatorFaults(errorRate: 1, errorStatus: 500))
            let summary = try await fixture.exchangeJob(options: Self.quickBackoff(maxOutageSeconds: 0.2)).run()
            #expect(summary.stopReason?.code == .appleUnreachable, "\(String(describing: summary.stopReason))")
            #expect(summary.stopReason?.reason.contains("rerun to continue") == true)
            #expect(summary.hasFailures)
            #expect(summary.counts.failed == 0 && summary.counts.unresolvable == 0)
            #expect(summary.remaining == 30)
            #expect(try fixture.count("SELECT count(*) FROM baton.transfers WHERE state = 'pending' AND attempts = 0 AND last_error IS NULL AND lease_owner IS NULL") == 30)
            try fixture.emulator.setFaults(EmulatorFaults())
            let rerun = try await fixture.exchangeJob(options: Self.quickBackoff()).run()
            #expect(rerun.stopReason == nil && rerun.counts.succeeded == 30 && rerun.remaining == 0)
            #expect(try fixture.count("SELECT count(*) FROM baton.events WHERE kind = 'migrated'") == 30)
        }
    }

    @Test("the wrong side's credentials (invalid_client) still stop the job at once, however many users are left")
    func invalidClientStops() async throws {
        try await BulkJobFixture.run(users: 30) { fixture in
            let summary = try await fixture.exchangeJob(options: Self.quickBackoff(), team: fixture.sender).run()
            #expect(summary.stopReason?.code == .stopped)
            #expect(summary.stopReason?.reason.contains("invalid_client") == true, "\(String(describing: summary.stopReason))")
            #expect(summary.remaining == 30)
            #expect(summary.counts.requests <= 4)
            #expect(try fixture.count("SELECT count(*) FROM baton.transfers WHERE state <> 'pending' OR lease_owner IS NOT NULL") == 0)
        }
    }

    @Test("revoked users are recorded unresolvable with Apple's reason, and the job goes on")
    func revokedUsers() async throws {
        try await BulkJobFixture.run(users: 20) { fixture in
            let revoked = Array(fixture.users.prefix(3))
            for user in revoked {
                try fixture.emulator.revoke(clientID: BulkJobFixture.clientID, userIdentifier: user.userIdentifier)
            }
            let summary = try await fixture.exchangeJob(options: BulkJobOptions(workers: 3, rate: 500)).run()
            #expect(summary.stopReason == nil)
            #expect(summary.counts.succeeded == 17)
            #expect(summary.counts.unresolvable == 3)
            #expect(summary.hasFailures)
            let subs = revoked.map { "'\($0.userIdentifier)'" }.joined(separator: ",")
            #expect(try fixture.count("SELECT count(*) FROM baton.transfers WHERE state = 'unresolvable' AND last_error = 'invalid_request' AND old_sub IN (\(subs))") == 3)
        }
    }

    @Test("the window closing during a run stops the job; the users left stay pending")
    func windowClosesDuringRun() async throws {
        try await BulkJobFixture.run(users: 40) { fixture in
            let emulator = fixture.emulator
            // The job reads the emulator's clock; after 10 migrations the clock passes day 60.
            let job = try fixture.exchangeJob(options: BulkJobOptions(workers: 1, rate: 500), now: { emulator.now })
            let watcher = Task {
                while job.counters.snapshot.succeeded < 10 { try await Task.sleep(for: .milliseconds(5)) }
                try emulator.advanceClock(by: 61 * 86_400)
            }
            let summary = await job.run()
            try await watcher.value
            #expect(summary.stopReason?.code == .windowClosed, "\(String(describing: summary.stopReason))")
            #expect(summary.counts.succeeded >= 10 && summary.counts.succeeded < 40)
            #expect(summary.remaining == 40 - summary.counts.succeeded)
            #expect(try fixture.count("SELECT count(*) FROM baton.transfers WHERE state = 'unresolvable'") == 0)
            #expect(try fixture.count("SELECT count(*) FROM baton.transfers WHERE state = 'pending'") == summary.remaining)
        }
    }

    @Test("three jobs at once, each with its own pool (as three processes): no user exchanged twice")
    func threeConcurrentJobs() async throws {
        try await BulkJobFixture.run(users: 90) { fixture in
            let pools = (0..<3).map { _ in PostgresPool(url: fixture.database.url, maxConnections: 3) }
            let jobs = try pools.map { try fixture.exchangeJob(options: BulkJobOptions(workers: 3, rate: 20), pool: $0) }
            let summaries = await withTaskGroup(of: BulkJobSummary.self) { group in
                for job in jobs { group.addTask { await job.run() } }
                return await group.reduce(into: []) { $0.append($1) }
            }
            for pool in pools { await pool.close() }
            #expect(summaries.allSatisfy { $0.stopReason == nil })
            #expect(summaries.map(\.counts.succeeded).reduce(0, +) == 90)
            #expect(summaries.allSatisfy { $0.counts.succeeded > 0 })
            #expect(try fixture.count("SELECT count(*) FROM baton.events WHERE kind = 'migrated'") == 90)
            #expect(try fixture.count("SELECT count(*) FROM (SELECT old_sub FROM baton.events GROUP BY old_sub HAVING count(*) > 1) d") == 0)
        }
    }

    @Test("a dead worker's leased rows are taken over once the lease expires")
    func leaseTakeover() async throws {
        try await BulkJobFixture.run(users: 10) { fixture in
            // A "dead" owner claimed everything with a 1-second lease and never came back.
            let dead = TransferQueue(pool: fixture.database.pool, kind: .exchange, owner: "dead", leaseSeconds: 1)
            #expect(try await dead.claim(limit: 100).count == 10)
            let summary = try await fixture.exchangeJob(options: BulkJobOptions(workers: 2, rate: 500)).run()
            #expect(summary.counts.succeeded == 10)
            #expect(try fixture.count("SELECT count(*) FROM baton.events WHERE kind = 'migrated'") == 10)
        }
    }

    @Test("an exchange and sign-ins of the same users at the same time: each user rewritten once")
    func exchangeRacesSignIns() async throws {
        try await BulkJobFixture.run(users: 60) { fixture in
            let store = fixture.database.store
            let recipient = try fixture.client(fixture.recipient)
            let transfers = fixture.transfers
            let job = try fixture.exchangeJob(options: BulkJobOptions(workers: 4, rate: 500))
            // Sign-ins: the new sub comes from the same exchange answer (what the recipient's token carries).
            async let signIns: Int = withThrowingTaskGroup(of: Int.self) { group in
                for (oldSub, transferSub) in transfers {
                    group.addTask {
                        let user = try await recipient.exchange(transferIdentifier: transferSub)
                        let outcome = try await store.applyMigration(oldSub: oldSub, newSub: user.sub, newEmail: user.email,
                                                                     isPrivateEmail: user.isPrivateEmail, transferSub: transferSub, method: .signin)
                        if case .migrated = outcome { return 1 }
                        return 0
                    }
                }
                return try await group.reduce(0, +)
            }
            let summary = await job.run()
            let signedIn = try await signIns
            #expect(summary.stopReason == nil)
            #expect(summary.counts.succeeded + signedIn == 60)
            #expect(try fixture.count("SELECT count(*) FROM baton.events WHERE kind = 'migrated'") == 60)
            #expect(try fixture.count("SELECT count(*) FROM baton.transfers WHERE state = 'migrated'") == 60)
            #expect(try fixture.count("SELECT count(*) FROM public.users u JOIN baton.transfers t ON t.new_sub = u.apple_sub") == 60)
        }
    }

    @Test("transfer-ids walks the legacy table, stores a transfer identifier per user, and the exchange then uses them")
    func senderThenExchange() async throws {
        try await BulkJobFixture.run(users: 25, accept: false, seedTransfers: false) { fixture in
            let legacy = try StoreFixture.legacy.identifiers()
            let pool = fixture.database.pool
            #expect(try await LegacySeeder(pool: pool, legacy: legacy, pageSize: 7).seed() == 25)
            #expect(try await LegacySeeder(pool: pool, legacy: legacy, pageSize: 7).seed() == 0)
            // Through the one entry point the commands, the demo and the benchmark use.
            let sender = try BulkRun(queue: TransferQueue(pool: pool, kind: .transferIdentifiers),
                                     work: .transferIdentifiers(targetTeamID: fixture.recipient.teamID), client: try fixture.client(fixture.sender),
                                     options: BulkJobOptions(workers: 3, rate: 500), window: TransferWindow(acceptedAt: nil))
            let summary = await sender.run(total: 25, isTerminal: false, write: { _ in })
            #expect(summary.counts.succeeded == 25 && summary.remaining == 0)
            for (oldSub, transferSub) in fixture.transfers {
                #expect(try TestDatabase.psql(fixture.database.url, "SELECT transfer_sub FROM baton.transfers WHERE old_sub = '\(oldSub)'") == transferSub)
            }
            let acceptedAt = try fixture.emulator.acceptTransfer(clientID: BulkJobFixture.clientID)
            let exchange = try BulkRun(queue: TransferQueue(pool: pool, kind: .exchange), work: .exchange(applier: fixture.database.store),
                                       client: try fixture.client(fixture.recipient), options: BulkJobOptions(workers: 3, rate: 500),
                                       window: TransferWindow(acceptedAt: acceptedAt))
            let exchanged = await exchange.run(total: 25, isTerminal: false, write: { _ in })
            #expect(exchanged.counts.succeeded == 25)
            #expect(try fixture.count("SELECT count(*) FROM baton.events WHERE kind = 'migrated' AND method = 'exchange'") == 25)
        }
    }

    @Test("the sender step refuses the sending team as target")
    func senderRefusesOwnTeam() async throws {
        try await BulkJobFixture.run(users: 1, accept: false, seedTransfers: false) { fixture in
            let queue = TransferQueue(pool: fixture.database.pool, kind: .transferIdentifiers)
            #expect(throws: BulkJobError(.targetIsSender, "")) {
                _ = try TransferIdentifierStep(client: try fixture.client(fixture.sender), targetTeamID: fixture.sender.teamID, queue: queue)
            }
        }
    }
}

@Suite("Legacy walk and queue", .serialized)
struct LegacySeederTests {
    @Test("text keys, keyset pages, a transfer column's values kept, subjects already migrated skipped")
    func textKeys() async throws {
        try await StoreFixture.run("seeder", poolSize: 2) { database in
            try await database.pool.withConnection { connection in
                try await connection.executeScript(unsafeSQL: """
                    CREATE TABLE public.accounts (handle text PRIMARY KEY, sub text, mail text, tsub text);
                    INSERT INTO public.accounts SELECT 'user-' || lpad(i::text, 3, '0'), 'old.' || i, NULL, CASE WHEN i % 5 = 0 THEN 'ts.' || i END
                    FROM generate_series(1, 23) AS i;
                    INSERT INTO public.accounts VALUES ('user-nosub', NULL, NULL, NULL), ('user-new', 'new.1', NULL, NULL);
                    INSERT INTO baton.transfers (old_sub, transfer_sub, new_sub, state, method, migrated_at)
                    VALUES ('old.gone', 'ts.gone', 'new.1', 'migrated', 'signin', now());
                    """)
            }
            let legacy = try BatonConfiguration.Legacy(table: "public.accounts", keyColumn: "handle", subjectColumn: "sub", emailColumn: "mail", transferColumn: "tsub").identifiers()
            let seeder = LegacySeeder(pool: database.pool, legacy: legacy, pageSize: 4)
            let preview = try await seeder.preview(sample: 2)
            #expect(preview.count == 19)
            #expect(preview.sample == ["old.1", "old.2"])
            #expect(try await seeder.seed() == 23)
            #expect(try database.count("SELECT count(*) FROM baton.transfers WHERE transfer_sub LIKE 'ts.%' AND old_sub <> 'old.gone'") == 4)
            #expect(try database.count("SELECT count(*) FROM baton.transfers WHERE old_sub = 'new.1'") == 0)
            #expect(try await TransferQueue(pool: database.pool, kind: .transferIdentifiers).pendingCount() == 19)
            #expect(try await seeder.preview().count == 19)
        }
    }

    @Test("the recipient's walk: rows with a transfer identifier and no subject are queued by key, in keyset pages, once, beside rows an import or a sign-in made")
    func transferColumnRows() async throws {
        try await StoreFixture.run("seeder_recipient", poolSize: 2) { database in
            try await database.pool.withConnection { connection in
                try await connection.executeScript(unsafeSQL: """
                    CREATE TABLE public.accounts (handle text PRIMARY KEY, sub text, mail text, tsub text UNIQUE, kind text);
                    INSERT INTO public.accounts SELECT 'acct-' || lpad(i::text, 3, '0'), NULL, NULL, 'ts.' || i, 'apple' FROM generate_series(1, 20) AS i;
                    -- Not awaiting an exchange: no transfer identifier, migrated already, another provider's row.
                    INSERT INTO public.accounts VALUES ('acct-none', NULL, NULL, NULL, 'apple'), ('acct-done', 'new.1', NULL, 'ts.done', 'apple'),
                                                       ('acct-other', NULL, NULL, 'ts.other', 'google');
                    -- One imported as key,transfer_sub, one migrated by a sign-in.
                    INSERT INTO baton.transfers (legacy_key, transfer_sub) VALUES ('acct-003', 'ts.3');
                    INSERT INTO baton.transfers (legacy_key, transfer_sub, new_sub, state, method, migrated_at) VALUES ('acct-004', 'ts.4', 'new.4', 'migrated', 'signin', now());
                    """)
            }
            let legacy = try BatonConfiguration.Legacy(table: "public.accounts", keyColumn: "handle", subjectColumn: "sub", emailColumn: "mail",
                                                       transferColumn: "tsub", filters: ["kind": "apple"]).identifiers()
            let unqueued = try #require(LegacySeeder.unqueuedTransferColumnCount(legacy))
            #expect(try await database.pool.query(unqueued)[0].decode(Int.self, at: 0) == 18)
            let seeder = LegacySeeder(pool: database.pool, legacy: legacy, pageSize: 3)
            #expect(try await seeder.seedTransferColumn() == 18)
            #expect(try await seeder.seedTransferColumn() == 0)
            #expect(try await database.pool.query(unqueued)[0].decode(Int.self, at: 0) == 0)
            #expect(try database.count("SELECT count(*) FROM baton.transfers WHERE old_sub IS NULL AND legacy_key = 'acct-' || lpad(substr(transfer_sub, 4), 3, '0')") == 20)
            #expect(try database.count("SELECT count(*) FROM baton.transfers") == 20)
            #expect(try await TransferQueue(pool: database.pool, kind: .exchange).pendingCount() == 19)
            // Without a transfer column there is nothing to walk.
            let plain = try BatonConfiguration.Legacy(table: "public.accounts", keyColumn: "handle", subjectColumn: "sub", emailColumn: "mail").identifiers()
            #expect(LegacySeeder.unqueuedTransferColumnCount(plain) == nil)
            #expect(try await LegacySeeder(pool: database.pool, legacy: plain).seedTransferColumn() == 0)
        }
    }

    @Test("answers stored at once go in shared statements: each caller learns whether its own row was written; a failed statement writes nothing and the next works")
    func groupCommitOfTransferIdentifiers() async throws {
        try await StoreFixture.run("groupcommit", poolSize: 2) { database in
            try await database.pool.execute("""
                INSERT INTO baton.transfers (old_sub) SELECT 'o.' || i FROM generate_series(0, 59) AS i;
                """)
            let queue = TransferQueue(pool: database.pool, kind: .transferIdentifiers, owner: "a")
            let items = try await queue.claim(limit: 60)
            #expect(items.count == 60)
            // Ten rows finished meanwhile by someone else (a transfer identifier already stored): not written again.
            let finished = Set(items.prefix(10).map(\.id))
            try await database.pool.execute("UPDATE baton.transfers SET transfer_sub = 'other.' || id WHERE id = ANY(\(arrayLiteral(finished.map(String.init)))::bigint[])")
            let results = try await withThrowingTaskGroup(of: (Int64, Bool).self) { group in
                for item in items { group.addTask { (item.id, try await queue.storeTransferIdentifier(item, transferSub: "t.\(item.id)")) } }
                return try await group.reduce(into: [Int64: Bool]()) { $0[$1.0] = $1.1 }
            }
            #expect(results.count == 60)
            #expect(results.filter { $0.value }.count == 50)
            #expect(results.allSatisfy { $0.value == !finished.contains($0.key) })
            #expect(try database.count("SELECT count(*) FROM baton.transfers WHERE transfer_sub = 't.' || id AND attempts = 1 AND lease_owner IS NULL") == 50)
            #expect(try database.count("SELECT count(*) FROM baton.transfers WHERE transfer_sub = 'other.' || id AND attempts = 0") == 10)
            // A statement that fails (this transfer identifier belongs to another row) throws to its caller and writes nothing.
            try await database.pool.execute("INSERT INTO baton.transfers (old_sub) VALUES ('o.late')")
            let late = try await queue.claim(limit: 1)
            #expect(late.count == 1)
            await #expect(throws: PostgresError.self) {
                _ = try await queue.storeTransferIdentifier(late[0], transferSub: "t.\(items[20].id)")
            }
            #expect(try database.count("SELECT count(*) FROM baton.transfers WHERE old_sub = 'o.late' AND transfer_sub IS NULL AND attempts = 0") == 1)
            // The writer goes on after a failure.
            #expect(try await queue.storeTransferIdentifier(late[0], transferSub: "t.late") == true)
            #expect(try database.count("SELECT count(*) FROM baton.transfers WHERE old_sub = 'o.late' AND transfer_sub = 't.late'") == 1)
        }
    }

    @Test("claims never overlap, a failed attempt is deferred then failed after its last attempt, and retry-failed resets it")
    func queueLifecycle() async throws {
        try await StoreFixture.run("queue", poolSize: 2) { database in
            for i in 0..<10 { try await database.addTransfer(oldSub: "o.\(i)", transferSub: "t.\(i)") }
            let a = TransferQueue(pool: database.pool, kind: .exchange, owner: "a", maxAttempts: 2, retryBaseSeconds: 0)
            let b = TransferQueue(pool: database.pool, kind: .exchange, owner: "b", maxAttempts: 2, retryBaseSeconds: 0)
            let first = try await a.claim(limit: 6)
            let second = try await b.claim(limit: 6)
            #expect(first.count == 6 && second.count == 4)
            #expect(Set(first.map(\.oldSub)).isDisjoint(with: second.map(\.oldSub)))
            #expect(try await a.claim(limit: 6).isEmpty)
            #expect(try await a.postpone(first[0], reason: "server_error (HTTP 503)") == false)
            let again = try await a.claim(limit: 1)
            #expect(again.map(\.oldSub) == [first[0].oldSub] && again[0].attempts == 1)
            #expect(try await a.postpone(again[0], reason: "timeout") == true)
            #expect(try TestDatabase.psql(database.url, "SELECT state || ' ' || attempts || ' ' || last_error FROM baton.transfers WHERE old_sub = '\(first[0].oldSub!)'") == "failed 2 timeout")
            try await a.release(Array(first.dropFirst()))
            #expect(try await b.claim(limit: 10).count == 5)
            #expect(try await a.retryFailed() == 1)
            #expect(try await a.claim(limit: 10).map(\.oldSub) == [first[0].oldSub])
        }
    }

    @Test("a claim goes on from the id the last one reached; at the pass's end it takes what is left from the start: released rows, then deferred ones once due")
    func claimsGoOnFromTheLastID() async throws {
        try await StoreFixture.run("claimpass", poolSize: 2) { database in
            for i in 0..<12 { try await database.addTransfer(oldSub: "o.\(i)", transferSub: "t.\(i)") }
            let queue = TransferQueue(pool: database.pool, kind: .exchange, owner: "a", retryBaseSeconds: 0)
            let ids = try TestDatabase.psql(database.url, "SELECT string_agg(id::text, ',' ORDER BY id) FROM baton.transfers").split(separator: ",").map { Int64($0)! }
            let first = try await queue.claim(limit: 4, after: nil)
            #expect(first.items.map(\.id) == Array(ids[0..<4]) && first.next == ids[3])
            // The first two go back, one is deferred (due at once: the base delay is 0); the pass goes on past them.
            try await queue.release(Array(first.items[0..<2]))
            try await queue.postpone(first.items[2], reason: "timeout")
            let second = try await queue.claim(limit: 4, after: first.next)
            #expect(second.items.map(\.id) == Array(ids[4..<8]) && second.next == ids[7])
            let third = try await queue.claim(limit: 5, after: second.next)
            #expect(third.items.map(\.id) == Array(ids[8..<12]) && third.next == ids[11])
            // Past the last id: the queue from its start, never-deferred rows first, then the deferred one now due.
            let fourth = try await queue.claim(limit: 5, after: third.next)
            #expect(fourth.items.map(\.id) == [ids[0], ids[1], ids[2]] && fourth.next == ids[1])
            #expect(try await queue.claim(limit: 5, after: fourth.next).items.isEmpty)
        }
    }

    @Test("workers waiting for the same claim each get rows of their own: every row handed out once, the next batch claimed before this one runs out")
    func feederHandsEachRowOutOnce() async throws {
        try await StoreFixture.run("feeder", poolSize: 4) { database in
            for i in 0..<95 { try await database.addTransfer(oldSub: "o.\(i)", transferSub: "t.\(i)") }
            let queue = TransferQueue(pool: database.pool, kind: .exchange, owner: "a")
            let feeder = Feeder(queue: queue, batchSize: 10, isStopped: { false })
            let handed = try await withThrowingTaskGroup(of: [Int64].self) { group in
                for _ in 0..<8 {
                    group.addTask {
                        var ids: [Int64] = []
                        while let item = try await feeder.next() {
                            ids.append(item.id)
                            // A row is finished as a worker would: it leaves the queue.
                            try await database.pool.execute("UPDATE baton.transfers SET state = 'unresolvable', last_error = 'test', lease_owner = NULL WHERE id = \(item.id)")
                        }
                        return ids
                    }
                }
                return try await group.reduce(into: [Int64]()) { $0 += $1 }
            }
            #expect(handed.count == 95)
            #expect(Set(handed).count == 95)
            #expect(try database.count("SELECT count(*) FROM baton.transfers WHERE state = 'pending'") == 0)
        }
    }
}
