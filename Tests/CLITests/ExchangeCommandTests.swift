import BatonEmulator
import BatonJOSE
import Foundation
import TestSupport
import Testing

@Suite("baton exchange", .serialized)
struct ExchangeCommandTests {
    @Test("kill -9 in the middle of a run, then a rerun: every user migrated exactly once")
    func killAndRerun() async throws {
        try await CommandFixture.run(users: 300) { fixture in
            try fixture.emulator.setFaults(EmulatorFaults(latencyMilliseconds: 20))
            let config = try fixture.configuration()
            let first = try runProcessAsync(batonBinaryPath, ["exchange", "--config", config, "--workers", "4", "--rate", "100", "--lease", "2"])
            while try fixture.count("SELECT count(*) FROM baton.events WHERE kind = 'migrated'") < 60 {
                try await Task.sleep(for: .milliseconds(50))
            }
            first.signal(SIGKILL)
            let killed = try await offPool { try first.wait(timeout: 120) }
            #expect(killed.status == 128 + SIGKILL)
            let done = try fixture.count("SELECT count(*) FROM baton.events WHERE kind = 'migrated'")
            #expect(done < 300)

            let rerun = try await runBatonOffPool(["exchange", "--config", config, "--workers", "4", "--rate", "200", "--lease", "2"])
            #expect(rerun.status == 0, "\(rerun.stdout)\(rerun.stderr)")
            #expect(rerun.stdout.contains("remaining 0"))
            try fixture.expectEveryoneMigratedOnce(300)
        }
    }

    @Test("three processes at once: no user exchanged twice")
    func threeProcesses() async throws {
        try await CommandFixture.run(users: 240) { fixture in
            try fixture.emulator.setFaults(EmulatorFaults(latencyMilliseconds: 10))
            let config = try fixture.configuration()
            let processes = try (0..<3).map { _ in
                try runProcessAsync(batonBinaryPath, ["exchange", "--config", config, "--workers", "3", "--rate", "60"])
            }
            for process in processes {
                let result = try await offPool { try process.wait(timeout: 120) }
                #expect(result.status == 0, "\(result.stdout)\(result.stderr)")
            }
            try fixture.expectEveryoneMigratedOnce(240)
            #expect(try fixture.count("SELECT count(DISTINCT lease_owner) FROM baton.transfers") == 0)
        }
    }

    @Test("--metrics-file: the job's series for node_exporter while it runs, and its end")
    func metricsFile() async throws {
        try await CommandFixture.run(users: 30) { fixture in
            let config = try fixture.configuration()
            let directory = fixture.directory.path("metrics")
            let path = directory + "/exchange.prom"
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
            let started = Int(Date().timeIntervalSince1970)
            let process = try runProcessAsync(batonBinaryPath, ["exchange", "--config", config, "--rate", "10", "--metrics-file", path])
            var running = ""
            while running.isEmpty {
                let text = await offPool { (try? String(contentsOfFile: path, encoding: .utf8)) ?? "" }
                if text.contains("baton_job_running{command=\"exchange\"} 1\n") { running = text } else { try await Task.sleep(for: .milliseconds(20)) }
            }
            #expect(running.contains("baton_job_paused{command=\"exchange\",reason=\"apple_unreachable\"} 0\n"), "\(running)")
            let result = try await offPool { try process.wait(timeout: 120) }
            #expect(result.status == 0, "\(result.stdout)\(result.stderr)")

            let text = try await offPool { try String(contentsOfFile: path, encoding: .utf8) }
            var samples: [String: Double] = [:]
            for line in text.split(separator: "\n") where !line.hasPrefix("#") {
                let parts = line.split(separator: " ")
                #expect(parts.count == 2, "not a sample: \(line)")
                samples[String(parts[0])] = Double(parts[1])
            }
            #expect(samples["baton_job_running{command=\"exchange\"}"] == 0, "\(text)")
            #expect(samples["baton_job_done_total{command=\"exchange\",outcome=\"succeeded\"}"] == 30, "\(text)")
            #expect(samples["baton_job_done_total{command=\"exchange\",outcome=\"failed\"}"] == 0)
            #expect(samples["baton_job_remaining{command=\"exchange\"}"] == 0)
            #expect(samples["baton_job_rate_limited_total{command=\"exchange\"}"] == 0)
            #expect(samples["baton_job_paused{command=\"exchange\",reason=\"apple_unreachable\"}"] == 0)
            #expect(samples["baton_job_throttled_seconds_total{command=\"exchange\"}"] == 0, "\(text)")
            #expect(samples["baton_job_throttled{command=\"exchange\",reason=\"replica_lag\"}"] == 0, "\(text)")
            #expect(samples["baton_job_throttled{command=\"exchange\",reason=\"active_backends\"}"] == 0, "\(text)")
            let progress = try #require(samples["baton_job_last_progress_timestamp_seconds{command=\"exchange\"}"])
            #expect(Int(progress) >= started && progress <= Date().timeIntervalSince1970, "\(text)")
            for family in ["baton_job_running gauge", "baton_job_done_total counter", "baton_job_rate_limited_total counter", "baton_job_throttled_seconds_total counter", "baton_job_throttled gauge"] {
                #expect(text.contains("# TYPE \(family)\n"))
            }
            // Written beside it and renamed: no temporary file is left.
            #expect(try FileManager.default.contentsOfDirectory(atPath: directory) == ["exchange.prom"])
            try fixture.expectEveryoneMigratedOnce(30)
        }
    }

    @Test("--metrics-file in a missing directory: a usage error before any user is exchanged")
    func metricsFileUnwritable() async throws {
        try await CommandFixture.run(users: 3) { fixture in
            let result = try await runBatonOffPool(["exchange", "--config", try fixture.configuration(),
                                                    "--metrics-file", fixture.directory.path("missing/exchange.prom")])
            #expect(result.status == 2, "\(result.stderr)")
            #expect(result.stderr.contains("cannot write --metrics-file"))
            let url = fixture.databaseURL
            #expect(try await offPool { try TestDatabase.psql(url, "SELECT count(*) FROM baton.transfers WHERE state = 'pending'") } == "3")
        }
    }

    @Test("after day 60 the exchange refuses to start and says how many users were left")
    func refusesAfterWindow() async throws {
        try await CommandFixture.run(users: 5) { fixture in
            let config = try fixture.configuration(acceptedAt: Date().addingTimeInterval(-61 * 86_400))
            let result = try await runBatonOffPool(["exchange", "--config", config])
            #expect(result.status == 1)
            #expect(result.stderr.contains("window closed"))
            #expect(result.stderr.contains("5 users were left pending"))
            #expect(try fixture.count("SELECT count(*) FROM baton.transfers WHERE state = 'pending'") == 5)
        }
    }

    @Test("near day 60 the exchange warns, then runs")
    func warnsNearDeadline() async throws {
        try await CommandFixture.run(users: 3) { fixture in
            // The emulator's window is open (accepted now); Baton's configuration says day 57.
            let config = try fixture.configuration(acceptedAt: Date().addingTimeInterval(-57 * 86_400))
            let result = try await runBatonOffPool(["exchange", "--config", config, "--rate", "50"])
            #expect(result.status == 0, "\(result.stderr)")
            #expect(result.stderr.contains("warning: the 60-day window closes in 2 days"))
            try fixture.expectEveryoneMigratedOnce(3)
        }
    }

    @Test("--dry-run checks the credentials and changes nothing; no secret is printed")
    func dryRun() async throws {
        try await CommandFixture.run(users: 4) { fixture in
            let result = try await runBatonOffPool(["exchange", "--config", try fixture.configuration(), "--dry-run"])
            #expect(result.status == 0, "\(result.stderr)")
            #expect(result.stdout.contains("dry run: 4 users pending"))
            #expect(try fixture.count("SELECT count(*) FROM baton.transfers WHERE state = 'pending'") == 4)
            #expect(fixture.emulator.stats()["/auth/usermigrationinfo"].calls == 0)
            #expect(!(result.stdout + result.stderr).contains("eyJ"))
        }
    }

    @Test("revoked users: recorded unresolvable, the others migrated, exit 1")
    func revoked() async throws {
        try await CommandFixture.run(users: 6) { fixture in
            let sub = try TestDatabase.psql(fixture.databaseURL, "SELECT old_sub FROM baton.transfers ORDER BY old_sub LIMIT 1")
            try fixture.emulator.revoke(clientID: "com.example.app", userIdentifier: sub)
            let result = try await runBatonOffPool(["exchange", "--config", try fixture.configuration(), "--rate", "50"])
            #expect(result.status == 1)
            #expect(result.stdout.contains("done 5") && result.stdout.contains("unresolvable 1"))
            #expect(try TestDatabase.psql(fixture.databaseURL, "SELECT state || ' ' || last_error FROM baton.transfers WHERE old_sub = '\(sub)'") == "unresolvable invalid_request")
        }
    }

    @Test("Apple failing past --max-outage: exit 1 with the reason, every user still pending and unmarked; a rerun once Apple is back finishes")
    func outageLimit() async throws {
        try await CommandFixture.run(users: 6) { fixture in
            try fixture.emulator.setFaults(EmulatorFaults(errorRate: 1, errorStatus: 503))
            let config = try fixture.configuration()
            let stopped = try await runBatonOffPool(["exchange", "--config", config, "--rate", "50", "--max-outage", "1"])
            #expect(stopped.status == 1, "\(stopped.stdout)\(stopped.stderr)")
            #expect(stopped.stderr.contains("Apple has not answered") && stopped.stderr.contains("--max-outage"), "\(stopped.stderr)")
            #expect(stopped.stdout.contains("failed 0, remaining 6"), "\(stopped.stdout)")
            #expect(try fixture.count("SELECT count(*) FROM baton.transfers WHERE state = 'pending' AND attempts = 0 AND last_error IS NULL") == 6)
            try fixture.emulator.setFaults(EmulatorFaults())
            let rerun = try await runBatonOffPool(["exchange", "--config", config, "--rate", "50"])
            #expect(rerun.status == 0, "\(rerun.stdout)\(rerun.stderr)")
            try fixture.expectEveryoneMigratedOnce(6)
        }
    }
}

@Suite("baton transfer-ids", .serialized)
struct TransferIDsCommandTests {
    @Test("refuses the sending team as target")
    func refusesOwnTeam() async throws {
        try await CommandFixture.run(users: 2, accept: false, database: .migrated(seedTransfers: false)) { fixture in
            let result = try await runBatonOffPool(["transfer-ids", "--config", try fixture.configuration(), "--target", fixture.sender.teamID, "--yes"])
            #expect(result.status == 2)
            #expect(result.stderr.contains("is the sending team itself"))
            #expect(fixture.emulator.stats()["/auth/usermigrationinfo"].calls == 0)
        }
    }

    @Test("a legacy table serve refuses: transfer-ids, exchange, merge and rollback refuse it too, naming the index to create")
    func refusesWhatServeRefuses() async throws {
        try await CommandFixture.run(users: 3, initiate: false, accept: false, database: .migrated(seedTransfers: false)) { fixture in
            _ = try TestDatabase.psql(fixture.databaseURL, "ALTER TABLE public.users DROP CONSTRAINT users_apple_sub_key")
            let config = try fixture.configuration()
            let fix = #"CREATE UNIQUE INDEX CONCURRENTLY ON "public"."users" ("apple_sub")"#
            let serve = try await runBatonOffPool(["serve", "--config", config])
            #expect(serve.status == 1 && serve.stderr.contains(fix), "\(serve.stderr)")
            for arguments in [["transfer-ids", "--yes"], ["transfer-ids", "--dry-run"], ["transfer-ids", "--export", fixture.directory.path("out.csv")],
                              ["exchange", "--dry-run"], ["merge", "--yes"], ["rollback", "--since", "2026-01-01T00:00:00Z", "--yes"]] {
                let result = try await runBatonOffPool(arguments + ["--config", config])
                #expect(result.status == 1, "\(arguments): \(result.stdout)\(result.stderr)")
                #expect(result.stderr.contains("baton \(arguments[0]): ") && result.stderr.contains("apple_sub has no unique constraint")
                        && result.stderr.contains(fix), "\(arguments): \(result.stderr)")
            }
            #expect(try fixture.count("SELECT count(*) FROM baton.transfers") == 0)
            #expect(fixture.emulator.stats()["/auth/usermigrationinfo"].calls == 0)
            _ = try TestDatabase.psql(fixture.databaseURL, fix)
            let real = try await runBatonOffPool(["transfer-ids", "--config", config, "--yes"])
            #expect(real.status == 0, "\(real.stdout)\(real.stderr)")
            #expect(try fixture.count("SELECT count(*) FROM baton.transfers WHERE transfer_sub IS NOT NULL") == 3)
        }
    }

    @Test("asks for confirmation: without --yes and without a terminal nothing is done")
    func needsConfirmation() async throws {
        try await CommandFixture.run(users: 3, accept: false, database: .migrated(seedTransfers: false)) { fixture in
            let result = try await runBatonOffPool(["transfer-ids", "--config", try fixture.configuration()])
            #expect(result.status == 2)
            #expect(result.stdout.contains("target team: \(fixture.recipient.teamID)"))
            #expect(result.stdout.contains("3 users need a transfer identifier"))
            #expect(result.stderr.contains("--yes"))
            #expect(try fixture.count("SELECT count(*) FROM baton.transfers WHERE transfer_sub IS NOT NULL") == 0)
        }
    }

    @Test("--dry-run shows the target and the count, makes the first user's identifier as a real run would, and writes nothing")
    func dryRun() async throws {
        try await CommandFixture.run(users: 4, accept: false, database: .migrated(seedTransfers: false)) { fixture in
            let result = try await runBatonOffPool(["transfer-ids", "--config", try fixture.configuration(), "--dry-run"])
            #expect(result.status == 0, "\(result.stderr)")
            #expect(result.stdout.contains("4 users need a transfer identifier"))
            #expect(result.stdout.contains("dry run: 4 users pending; credentials accepted by Apple, and a transfer identifier made for the first user"))
            #expect(try fixture.count("SELECT count(*) FROM baton.transfers") == 0)
            #expect(fixture.emulator.stats()["/auth/usermigrationinfo"].calls == 1)
        }
    }

    @Test("before the transfer is initiated: --dry-run and a real run both succeed, and the identifiers are the recipient's")
    func beforeInitiation() async throws {
        try await CommandFixture.run(users: 5, initiate: false, database: .migrated(seedTransfers: false)) { fixture in
            let config = try fixture.configuration()
            let dry = try await runBatonOffPool(["transfer-ids", "--config", config, "--dry-run"])
            #expect(dry.status == 0, "\(dry.stdout)\(dry.stderr)")
            #expect(dry.stdout.contains("a transfer identifier made for the first user"))
            let real = try await runBatonOffPool(["transfer-ids", "--config", config, "--yes", "--rate", "100"])
            #expect(real.status == 0, "\(real.stdout)\(real.stderr)")
            #expect(try fixture.count("SELECT count(*) FROM baton.transfers WHERE transfer_sub IS NOT NULL") == 5)
            // Initiated and accepted afterwards: the identifiers made before initiation are the ones Apple exchanges.
            try fixture.emulator.initiateTransfer(clientID: "com.example.app", toTeamID: fixture.recipient.teamID)
            try fixture.emulator.acceptTransfer(clientID: "com.example.app")
            for (oldSub, transferSub) in try fixture.emulator.transferIdentifiers(clientID: "com.example.app") {
                #expect(try TestDatabase.psql(fixture.databaseURL, "SELECT transfer_sub FROM baton.transfers WHERE old_sub = '\(oldSub)'") == transferSub)
            }
        }
    }

    @Test("a user the first run missed: in the window the token carries transfer_sub anyway, and a second run stores that same identifier")
    func lateUser() async throws {
        try await CommandFixture.run(users: 3, initiate: false, database: .migrated(seedTransfers: false)) { fixture in
            let config = try fixture.configuration()
            #expect(try await runBatonOffPool(["transfer-ids", "--config", config, "--yes"]).status == 0)
            // Signs up with team A after the run, then the app is transferred.
            let late = try fixture.emulator.createUsers(clientID: "com.example.app", count: 1)[0]
            _ = try TestDatabase.psql(fixture.databaseURL, "INSERT INTO public.users (apple_sub) VALUES ('\(late.userIdentifier)')")
            try fixture.emulator.initiateTransfer(clientID: "com.example.app", toTeamID: fixture.recipient.teamID)
            try fixture.emulator.acceptTransfer(clientID: "com.example.app")
            let token = try fixture.emulator.authorize(clientID: "com.example.app", user: late.id).idToken
            let claimed = try #require(try CompactJWS.parse(token).claims()["transfer_sub"]?.stringValue)
            #expect(try fixture.count("SELECT count(*) FROM baton.transfers WHERE transfer_sub = '\(claimed)'") == 0)
            let again = try await runBatonOffPool(["transfer-ids", "--config", config, "--yes"])
            #expect(again.status == 0, "\(again.stdout)\(again.stderr)")
            #expect(again.stdout.contains("1 users need a transfer identifier"))
            #expect(try TestDatabase.psql(fixture.databaseURL, "SELECT transfer_sub FROM baton.transfers WHERE old_sub = '\(late.userIdentifier)'") == claimed)
        }
    }

    @Test("--dry-run fails where a real run would: a target other than the transfer's recipient")
    func dryRunRefusesWrongTarget() async throws {
        try await CommandFixture.run(users: 3, accept: false, database: .migrated(seedTransfers: false)) { fixture in
            let third = try fixture.emulator.createTeam()
            let dry = try await runBatonOffPool(["transfer-ids", "--config", try fixture.configuration(), "--dry-run", "--target", third.teamID])
            #expect(dry.status == 1, "\(dry.stdout)\(dry.stderr)")
            #expect(dry.stderr.contains("invalid_request"), "\(dry.stderr)")
            #expect(dry.stderr.contains("The target is not the team ID of the transfer's recipient"), "\(dry.stderr)")
            #expect(try fixture.count("SELECT count(*) FROM baton.transfers") == 0)
        }
    }

    @Test("with --yes: a transfer identifier for every legacy user, for the recipient's team; a rerun does nothing")
    func createsIdentifiers() async throws {
        try await CommandFixture.run(users: 12, accept: false, database: .migrated(seedTransfers: false)) { fixture in
            let config = try fixture.configuration()
            let result = try await runBatonOffPool(["transfer-ids", "--config", config, "--yes", "--rate", "100"])
            #expect(result.status == 0, "\(result.stderr)")
            #expect(try fixture.count("SELECT count(*) FROM baton.transfers WHERE transfer_sub IS NOT NULL") == 12)
            let expected = try fixture.emulator.transferIdentifiers(clientID: "com.example.app")
            for (oldSub, transferSub) in expected.prefix(3) {
                #expect(try TestDatabase.psql(fixture.databaseURL, "SELECT transfer_sub FROM baton.transfers WHERE old_sub = '\(oldSub)'") == transferSub)
            }
            let again = try await runBatonOffPool(["transfer-ids", "--config", config, "--yes"])
            #expect(again.status == 0)
            #expect(again.stdout.contains("0 users need a transfer identifier"))
        }
    }
}

@Suite("baton import transfers", .serialized)
struct ImportCommandTests {
    @Test("bad lines are reported with their numbers and reasons, the rest loaded once; a re-import changes nothing")
    func badLines() async throws {
        let directory = try KeyDirectory()
        defer { directory.remove() }
        let url = try TestDatabase.create("import")
        let migrate = try await runBatonOffPool(["db", "migrate", "--database-url", url])
        #expect(migrate.status == 0)
        try directory.write("t.csv", """
            old_sub,transfer_sub
            000001.aa.01,t.01
            000002.aa.02,t.02
            not a pair
            000003.aa.03,t.02
            000001.aa.01,t.09
            ,t.04
            000005.aa.05,t.05\r
            """)
        let first = try await runBatonOffPool(["import", "transfers", directory.path("t.csv"), "--database-url", url])
        #expect(first.status == 1)
        #expect(first.stderr.split(separator: "\n") == [
            "line 4: expected 2 fields, found 1", "line 5: transfer_sub repeats line 3", "line 6: old_sub repeats line 2", "line 7: old_sub is empty",
        ])
        #expect(first.stdout.contains("7 lines: loaded 3, already present 0, rejected 4"))
        #expect(try TestDatabase.psql(url, "SELECT string_agg(old_sub || '=' || transfer_sub, ' ' ORDER BY old_sub) FROM baton.transfers")
                == "000001.aa.01=t.01 000002.aa.02=t.02 000005.aa.05=t.05")
        let second = try await runBatonOffPool(["import", "transfers", directory.path("t.csv"), "--database-url", url])
        #expect(second.stdout.contains("loaded 0, already present 3, rejected 4"))
        #expect(try TestDatabase.psql(url, "SELECT count(*) FROM baton.transfers") == "3")
    }

    @Test("a file without the header is refused whole")
    func missingHeader() async throws {
        let directory = try KeyDirectory()
        defer { directory.remove() }
        let url = try TestDatabase.create("import")
        _ = try await runBatonOffPool(["db", "migrate", "--database-url", url])
        try directory.write("t.csv", "a,b\n")
        let result = try await runBatonOffPool(["import", "transfers", directory.path("t.csv"), "--database-url", url])
        #expect(result.status == 1)
        #expect(result.stderr.contains("header 'old_sub,transfer_sub'"))
        #expect(try TestDatabase.psql(url, "SELECT count(*) FROM baton.transfers") == "0")
    }
}
