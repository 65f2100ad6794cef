import BatonCommandLine
import Baton
import BatonJobs
import Foundation
import BatonPostgres
import BatonLogging

/// `baton merge`: moves the Apple identity of each recorded duplicate (`baton.duplicates`) onto the legacy record.
let mergeCommand = Command(
    name: "merge",
    summary: "merge duplicates: second accounts made under the new team's identifier during the cutover",
    abstract: """
    A user who signed in after the transfer's acceptance through a path that did not go through Baton got a
    second record under the receiving team's identifier, while the real one still waits for it. Baton
    records each such pair in baton.duplicates when a sign-in, the exchange or a re-link meets it
    (baton report lists them). This command moves the identifier onto the real record, one transaction per
    pair: the fresh record's subject is released (NULL, or 'baton-released:' + the identifier when the
    column is NOT NULL), then the real record is migrated as on a sign-in, with events holding every old
    value. No row is deleted and nothing else of the fresh record changes. Running it again merges 0.
    While the database is busy (--max-replica-lag, --max-active-backends), it waits before each pair.
    """,
    options: MergeOptions.self,
    discussion: "Exit status: 0 done, 1 the database failed, 2 usage or configuration errors (neither --dry-run nor --yes).",
    run: runMerge
)

/// The options of `baton merge`.
private struct MergeOptions: CommandOptions {
    let dryRun = Option.flag("dry-run", "print the pairs it would merge and change nothing")
    let yes = Option.flag("yes", "merge them")
    let config = Option.config
    let throttle = ThrottleOptions()
}

@Sendable
private func runMerge(_ parsed: Parsed<MergeOptions>) async throws -> Int32 {
    let dryRun = parsed.dryRun
    guard dryRun != parsed.yes else {
        throw CommandFailure.usage("give --dry-run to see the pairs, or --yes to merge them")
    }
    let configuration = try await loadConfiguration(parsed.config)
    let pool = configuration.database.pool(maxConnections: 1)
    // The throttle probes on a connection of its own, so a long merge never holds it up.
    let probePool = configuration.database.pool(maxConnections: 1)
    let logger = Logger(label: "baton.merge")
    let throttle = JobThrottle(limits: parsed.throttle.limits(configuration.jobs), probe: ThrottleProbe(pool: probePool), logger: logger)
    let hangUps = rereadingThrottleLimits(throttle, configurationPath: parsed.config, logger: logger)
    defer { hangUps.cancel() }
    let started = ContinuousClock.now
    try await withTeardown {
        let store = try await checkedLegacyStore("merge", configuration: configuration, pool: pool)
        do {
            if dryRun {
                let pending = try await store.duplicates(unmergedOnly: true)
                for duplicate in pending {
                    print("would merge fresh \(duplicate.pair.freshKey) into legacy \(duplicate.pair.legacyKey) (found by \(duplicate.foundBy.rawValue))")
                }
                print("would merge \(pending.count)")
            } else {
                let merged = try await throttle.monitoring { try await store.mergeDuplicates(beforeEach: { await throttle.waitUntilClear() }) }
                for merge in merged {
                    let account = merge.sameAccount ? "; one account: nothing for the application to move" : ""
                    print("merged fresh \(merge.freshKey) into legacy \(merge.user.key)\(account)")
                }
                print("merged \(merged.count); \(throttledText(throttle, since: started))")
            }
        } catch let error as PostgresError {
            throw CommandFailure.failed("baton merge: \(error)")
        }
    } teardown: {
        await pool.close()
        await probePool.close()
    }
    return 0
}
