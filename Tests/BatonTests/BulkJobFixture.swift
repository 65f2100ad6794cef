import BatonEmulator
import BatonAppleSignIn
import Baton
import BatonJobs
import Foundation
import BatonPostgres
import TestSupport

/// A transfer on a live emulator with `count` users, the legacy table holding them under the sending team's
/// identifiers, and (for the exchange) their transfer identifiers pending in `baton.transfers`.
struct BulkJobFixture {
    static let clientID = EmulatedTransfer.clientID
    let emulator: AppleEmulator
    let database: StoreFixture
    let sender: TeamCredentials
    let recipient: TeamCredentials
    /// Old sub → transfer sub.
    let transfers: [String: String]
    let users: [EmulatedUser]
    let acceptedAt: Date?

    /// Runs `body` with a fixture; `accept` false leaves the transfer initiated but not accepted (sender side).
    static func run(users count: Int, accept: Bool = true, seedTransfers: Bool = true, _ body: (BulkJobFixture) async throws -> Void) async throws {
        try await withEmulator { emulator in
            let transfer = try EmulatedTransfer(on: emulator, users: count, accept: accept)
            let (users, transfers) = (transfer.users, transfer.transferIdentifiers)
            try await StoreFixture.run("bulk", poolSize: 5) { database in
                try await database.pool.withConnection { connection in
                    try await connection.execute("""
                        INSERT INTO public.users (apple_sub, email)
                        SELECT s, 'u' || s || '@privaterelay.appleid.com' FROM unnest(\(arrayText(users.map(\.userIdentifier)))::text[]) AS s
                        """)
                    if seedTransfers {
                        try await connection.execute("""
                            INSERT INTO baton.transfers (old_sub, transfer_sub)
                            SELECT * FROM unnest(\(arrayText(Array(transfers.keys)))::text[], \(arrayText(Array(transfers.values)))::text[])
                            """)
                    }
                }
                try await body(BulkJobFixture(emulator: emulator, database: database, sender: transfer.sender, recipient: transfer.recipient,
                                              transfers: transfers, users: users, acceptedAt: transfer.acceptedAt))
            }
        }
    }

    /// A client for `team` with the job's settings (no internal retries: the job sees every 429).
    /// Its clock is the emulator's, so secrets and tokens follow the emulator's time when a test moves it.
    func client(_ team: TeamCredentials, connections: Int = 8) throws -> AppleClient {
        let secret = try ClientSecret(teamID: team.teamID, keyID: team.keyID, clientID: BulkJobFixture.clientID, pem: team.privateKeyPEM)
        let emulator = self.emulator
        return AppleClient(baseURL: emulator.baseURL, credentials: secret,
                           options: AppleClient.Options(requestTimeout: 10, retry: RetryPolicy(maxAttempts: 1), maxConnectionsPerHost: connections),
                           now: { emulator.now })
    }

    /// An exchange job over this fixture's database (its own pool when `pool` is given, for "other processes").
    /// `team` is the recipient unless a test gives the wrong side's credentials.
    func exchangeJob(options: BulkJobOptions, pool: PostgresPool? = nil, leaseSeconds: Int = 30, retryBaseSeconds: Double = 0.2, team: TeamCredentials? = nil,
                     now: @escaping @Sendable () -> Date = { Date() }) throws -> BulkJob {
        let pool = pool ?? database.pool
        let queue = TransferQueue(pool: pool, kind: .exchange, leaseSeconds: leaseSeconds, retryBaseSeconds: retryBaseSeconds)
        let store = LegacyStore(pool: pool, legacy: try StoreFixture.legacy.identifiers())
        return BulkJob(queue: queue, step: ExchangeStep(client: try client(team ?? recipient), applier: store), options: options,
                       window: TransferWindow(acceptedAt: acceptedAt), requireOpenWindow: true, now: now)
    }

    /// Reads one integer through psql.
    func count(_ sql: String) throws -> Int { try database.count(sql) }
}

/// A PostgreSQL text-array literal for test data (identifiers only: no quotes or backslashes).
func arrayText(_ values: [String]) -> String {
    "{" + values.map { "\"\($0)\"" }.joined(separator: ",") + "}"
}
