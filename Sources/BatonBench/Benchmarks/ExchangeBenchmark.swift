import BatonCommandLine
import BatonEmulator
import BatonAppleSignIn
import Baton
import BatonJobs
import Foundation
import BatonJSON
import BatonLogging
import BatonPostgres

/// `baton-bench exchange`: the exchange job against the in-process emulator (20 ms latency, a 200/s limit) on a
/// throwaway database, then the same work one request at a time as the public scripts do it.
///
/// Options: `--users N` (default 20,000) pending users to exchange; `--backlog N` (default 0) more pending rows
/// that sort after them (so the queue holds N + backlog rows; they are not exchanged); `--limit R` (default 200)
/// the emulator's limit and the job's `--rate`; `--latency-ms` (20); `--workers` (32); `--sequential-seconds` (5).
/// The database is `--database-url` or `BATON_DATABASE_URL`, and must hold no transfers yet.
@Sendable
func runExchangeBenchmark(_ arguments: Parsed<ExchangeBenchmarkOptions>) async throws -> Int32 {
    guard let url = databaseURLOrEnvironment(arguments.databaseURL) else {
        throw CommandFailure.usage("no database: give --database-url or set BATON_DATABASE_URL (a throwaway one)")
    }
    let users = arguments.users
    let backlog = arguments.backlog
    let limit = arguments.limit
    let latency = arguments.latencyMs
    let workers = arguments.workers
    let sequentialSeconds = arguments.sequentialSeconds
    let sequentialUsers = Int(sequentialSeconds * 1000 / Double(max(1, latency))) + 50

    let clientID = "com.example.bench"
    let emulator = try await AppleEmulator.start()
    let pool = PostgresPool(url: url, maxConnections: workers + 2, acquireTimeout: .seconds(60))
    do {
        // The transfer, and users for the job and for the sequential run.
        let sender = try emulator.createTeam()
        let recipient = try emulator.createTeam()
        try emulator.createApp(clientID: clientID, teamID: sender.teamID)
        _ = try emulator.createUsers(clientID: clientID, count: users + sequentialUsers, privateEmail: true)
        try emulator.initiateTransfer(clientID: clientID, toTeamID: recipient.teamID)
        let all = try emulator.transferIdentifiers(clientID: clientID).sorted { $0.key < $1.key }
        let acceptedAt = try emulator.acceptTransfer(clientID: clientID)

        _ = try await BatonSchema.migrator().migrate(pool)
        guard try await pool.query("SELECT count(*) FROM baton.transfers")[0].decode(Int.self, at: 0) == 0 else {
            throw CommandFailure.usage("the database already holds transfers: give the benchmark a throwaway database")
        }
        try await pool.withConnection { connection in
            try await connection.executeScript(unsafeSQL: """
                DROP TABLE IF EXISTS public.bench_exchange_users;
                CREATE TABLE public.bench_exchange_users (id bigserial PRIMARY KEY, apple_sub text UNIQUE, email text);
                """)
        }
        print("loading \(all.count) users (\(users) for the job, \(all.count - users) for the sequential run) and \(backlog) backlog rows")
        for chunk in stride(from: 0, to: all.count, by: 5_000) {
            let slice = all[chunk..<min(all.count, chunk + 5_000)]
            let olds = benchArray(slice.map(\.key))
            try await pool.execute("""
                INSERT INTO public.bench_exchange_users (apple_sub, email)
                SELECT s, 'x' || s || '@privaterelay.appleid.com' FROM unnest(\(olds)::text[]) AS s
                """)
            if chunk < users {
                let jobSlice = slice.prefix(users - chunk)
                try await pool.execute("""
                    INSERT INTO baton.transfers (old_sub, transfer_sub)
                    SELECT * FROM unnest(\(benchArray(jobSlice.map(\.key)))::text[], \(benchArray(jobSlice.map(\.value)))::text[])
                    """)
            }
        }
        if backlog > 0 {
            // Rows after the job's in claim order (old_sub 'zz…'), for a queue as large as a real one.
            try await pool.execute("""
                INSERT INTO baton.transfers (old_sub, transfer_sub)
                SELECT 'zz.backlog.' || lpad(i::text, 9, '0'), 'zz.transfer.' || lpad(i::text, 9, '0') FROM generate_series(1, \(backlog)) AS i
                """)
        }
        try await pool.query("ANALYZE baton.transfers")

        let legacy = try BatonConfiguration.Legacy(table: "public.bench_exchange_users", keyColumn: "id", subjectColumn: "apple_sub", emailColumn: "email").identifiers()
        let store = LegacyStore(pool: pool, legacy: legacy)
        let secret = try ClientSecret(teamID: recipient.teamID, keyID: recipient.keyID, clientID: clientID, pem: recipient.privateKeyPEM)

        // The job, as `baton exchange --workers W --rate LIMIT` runs it.
        try emulator.setFaults(EmulatorFaults(rateLimitPerSecond: limit, latencyMilliseconds: latency))
        emulator.resetStats()
        let client = AppleClient(baseURL: emulator.baseURL, credentials: secret,
                                 options: AppleClient.Options(retry: RetryPolicy(maxAttempts: 1), maxConnectionsPerHost: workers))
        let run = try BulkRun(queue: TransferQueue(pool: pool, kind: .exchange), work: .exchange(applier: store), client: client,
                              options: BulkJobOptions(workers: workers, rate: limit), window: TransferWindow(acceptedAt: acceptedAt),
                              now: { emulator.now }, logger: Logger(label: "bench.exchange", level: .info))
        let job = run.job
        let jobStart = ContinuousClock.now
        let watcher = Task {
            // The job's time is from its start to its last user's rewrite; then it is stopped (with a backlog the
            // queue never empties).
            while job.counters.snapshot.succeeded < users { try await Task.sleep(for: .milliseconds(5)) }
            job.stop(BulkJobError(.stopped, "benchmark users done"))
            return ContinuousClock.now - jobStart
        }
        let summary = await run.run(total: users)
        watcher.cancel()
        let jobDuration = (try? await watcher.value) ?? (ContinuousClock.now - jobStart)
        let jobSeconds = Double(jobDuration.components.seconds) + Double(jobDuration.components.attoseconds) / 1e18
        let stats = emulator.stats()
        let overLimit = stats.endpoints.filter { $0.key.hasPrefix("/auth/") }.map(\.value.rateLimited).reduce(0, +)
        let achieved = Double(summary.counts.requests) / jobSeconds
        let migrated = try await pool.query("SELECT count(*) FROM baton.transfers WHERE state = 'migrated'")[0].decode(Int.self, at: 0)
        guard migrated == users else {
            throw CommandFailure.failed("baton-bench exchange: \(migrated) of \(users) users migrated, \(summary.counts.errors) errors")
        }

        // The public scripts: one request at a time, no limiter, for a few seconds.
        try emulator.setFaults(EmulatorFaults(latencyMilliseconds: latency))
        let sequentialClient = AppleClient(baseURL: emulator.baseURL, credentials: secret,
                                           options: AppleClient.Options(retry: RetryPolicy(maxAttempts: 1), maxConnectionsPerHost: 1))
        let sequentialStart = ContinuousClock.now
        var sequentialDone = 0
        for (oldSub, transferSub) in all[users...] {
            let user = try await sequentialClient.exchange(transferIdentifier: transferSub)
            _ = try await store.applyExchange(oldSub: oldSub, transferSub: transferSub, user: user)
            sequentialDone += 1
            if ContinuousClock.now - sequentialStart >= .milliseconds(Int64(sequentialSeconds * 1000)) { break }
        }
        let sequentialElapsed = ContinuousClock.now - sequentialStart
        let sequential = Double(sequentialDone) / (Double(sequentialElapsed.components.seconds) + Double(sequentialElapsed.components.attoseconds) / 1e18)

        var usage = rusage()
        getrusage(__rusage_who_t(RUSAGE_SELF.rawValue), &usage)
        let peakMB = Double(usage.ru_maxrss) / 1024

        await emulator.stop()
        await pool.close()
        print("exchange job: \(users) users in \(String(format: "%.1f", jobSeconds)) s with \(workers) workers, \(summary.counts.requests) requests, \(summary.counts.rateLimited) answered 429, \(summary.counts.failed) attempts deferred and retried; queue held \(users + backlog) rows, \(summary.counts.unresolvable) backlog rows reached (not real transfers: unresolvable)")
        print(String(format: "limit %.0f/s, achieved %.1f/s (%.1f %%), over limit %d; sequential %.1f/s; peak RSS %.1f MB", limit, achieved, achieved / limit * 100, overLimit, sequential, peakMB))
        let figures: JSONValue = [
            "limit_per_s": .number(limit),
            "achieved_per_s": .number((achieved * 10).rounded() / 10),
            "over_limit": .number(Double(overLimit)),
            "sequential_per_s": .number((sequential * 10).rounded() / 10),
            "peak_rss_mb": .number((peakMB * 10).rounded() / 10),
        ]
        print(JSON.serialize(figures))
        return overLimit == 0 && achieved >= 0.95 * limit ? 0 : 1
    } catch {
        await emulator.stop()
        await pool.close()
        throw error
    }
}

/// A PostgreSQL text-array literal of identifiers (the emulator's: letters, digits and dots only).
private func benchArray(_ values: [String]) -> String {
    "{" + values.joined(separator: ",") + "}"
}
