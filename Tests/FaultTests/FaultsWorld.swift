import BatonEmulator
import Foundation
import Synchronization
import TestSupport
import Testing

/// How much of the fault suite runs: a short form in `make test` (about a minute in all), the long form
/// (repeated kills, longer loads) in `make faults`, which sets `BATON_FAULTS=long`.
enum FaultLength {
    /// Whether the long form was asked for.
    static var isLong: Bool { ProcessInfo.processInfo.environment["BATON_FAULTS"] == "long" }

    /// `short` in the short form, `long` in the long one.
    static func pick<T>(short: T, long: T) -> T { isLong ? long : short }
}

/// One user of the scenario's app: the emulator's person, their identifier under the sending team, their
/// transfer identifier, and the identifier Apple gives them under the receiving team.
struct FaultPerson: Sendable {
    var id: String
    var oldSub: String
    var transferSub: String
    var newSub: String
}

/// The world a fault scenario runs in: a database holding Baton's schema and the application's `public.users`,
/// in a PostgreSQL cluster of the scenario's own when it stops the server or adds a tablespace (else a fresh
/// database in the shared test cluster, which starts much faster),
/// an emulator with a transfer accepted, the teams' keys and a configuration file on disk, and at most one
/// `baton serve` child at a time on a fixed loopback port (the same one across restarts).
final class FaultWorld: @unchecked Sendable {
    // `@unchecked Sendable`: every stored property is immutable except the emulator and the serve child,
    // which sit behind mutexes.
    static let clientID = "com.example.app"

    /// The scenario's own cluster, when it asked for one.
    let privateCluster: PrivateCluster?
    /// URL of the cluster's maintenance database.
    let serverURL: String
    let directory: KeyDirectory
    /// The application's database: its name and URL.
    let databaseName: String
    let databaseURL: String
    let people: [FaultPerson]
    /// The legacy table as it was before anything ran.
    let baseline: LegacySnapshot
    /// The port `baton serve` listens on, across restarts.
    let servePort: Int
    let emulatorPort: Int
    let sender: TeamCredentials
    let recipient: TeamCredentials
    /// When the emulator accepted the transfer (Baton's `accepted_at`).
    let acceptedAt: Date
    private let emulatorBox: Mutex<AppleEmulator?>
    private let serveBox = Mutex<RunningProcess?>(nil)

    /// The running emulator (or the last one, while it is down: it can still mint tokens in process).
    var emulator: AppleEmulator { emulatorBox.withLock { $0! } }

    private init(cluster: PrivateCluster?, serverURL: String, directory: KeyDirectory, databaseName: String, databaseURL: String,
                 people: [FaultPerson], baseline: LegacySnapshot, emulator: AppleEmulator, sender: TeamCredentials, recipient: TeamCredentials,
                 acceptedAt: Date) throws {
        self.acceptedAt = acceptedAt
        self.privateCluster = cluster
        self.serverURL = serverURL
        self.directory = directory
        self.databaseName = databaseName
        self.databaseURL = databaseURL
        self.people = people
        self.baseline = baseline
        self.emulatorBox = Mutex(emulator)
        self.emulatorPort = emulator.port
        self.sender = sender
        self.recipient = recipient
        self.servePort = try freeLoopbackPort()
    }

    /// Builds the world, runs `body`, and tears everything down (serve child, emulator, cluster, files)
    /// whether `body` succeeds or throws.
    /// - Parameters:
    ///   - users: people in the app, each with a legacy row and a pending transfer (old `sub`, `transfer_sub`).
    ///   - privateCluster: whether the scenario needs a cluster of its own (it stops the server, or adds a
    ///     tablespace); otherwise the database is created in the shared test cluster.
    ///   - tablespace: a directory for a tablespace that holds the whole application database (disk-full scenario;
    ///     needs `privateCluster`).
    static func run(users: Int, privateCluster: Bool = false, tablespace: String? = nil,
                    _ body: (FaultWorld) async throws -> Void) async throws {
        let cluster = privateCluster ? try await offPool { try PrivateCluster() } : nil
        let directory = try KeyDirectory()
        let statePath = directory.path("emulator-state.json")
        let emulator: AppleEmulator
        do {
            emulator = try await AppleEmulator.start(statePath: statePath)
        } catch {
            try? await offPool { try cluster?.destroy() }
            directory.remove()
            throw error
        }
        var world: FaultWorld?
        do {
            world = try await build(cluster: cluster, directory: directory, emulator: emulator, users: users, tablespace: tablespace)
            try await body(world!)
        } catch {
            await teardown(world, cluster: cluster, directory: directory, emulator: emulator)
            throw error
        }
        await teardown(world, cluster: cluster, directory: directory, emulator: emulator)
    }

    private static func teardown(_ world: FaultWorld?, cluster: PrivateCluster?, directory: KeyDirectory, emulator: AppleEmulator) async {
        if let world {
            _ = try? await world.stopServe(signal: SIGKILL)
            await world.emulator.stop()
        } else {
            await emulator.stop()
        }
        try? await offPool { try cluster?.destroy() }
        directory.remove()
    }

    private static func build(cluster: PrivateCluster?, directory: KeyDirectory, emulator: AppleEmulator, users count: Int,
                              tablespace: String?) async throws -> FaultWorld {
        let sender = try emulator.createTeam()
        let recipient = try emulator.createTeam()
        try emulator.createApp(clientID: clientID, teamID: sender.teamID)
        let users = try emulator.createUsers(clientID: clientID, count: count, privateEmail: true)
        try emulator.initiateTransfer(clientID: clientID, toTeamID: recipient.teamID)
        let transfers = try emulator.transferIdentifiers(clientID: clientID)
        let acceptedAt = try emulator.acceptTransfer(clientID: clientID)
        let people = try users.map { user in
            FaultPerson(id: user.id, oldSub: user.userIdentifier, transferSub: transfers[user.userIdentifier]!,
                        newSub: try emulator.authorize(clientID: clientID, user: user.id).userIdentifier)
        }
        try directory.write("sender.p8", sender.privateKeyPEM)
        try directory.write("recipient.p8", recipient.privateKeyPEM)

        let serverURL = try cluster?.url ?? TestDatabase.serverURL()
        let databaseName = "faults_\(UUID().uuidString.prefix(8).lowercased())"
        let databaseURL = serverURL.replacingOccurrences(of: "/postgres?", with: "/\(databaseName)?")
        try await offPool {
            if let tablespace {
                _ = try TestDatabase.psql(serverURL, "CREATE TABLESPACE tiny LOCATION '\(tablespace)'")
                _ = try TestDatabase.psql(serverURL, "CREATE DATABASE \(databaseName) TABLESPACE tiny")
            } else {
                _ = try TestDatabase.psql(serverURL, "CREATE DATABASE \(databaseName)")
            }
            let migrate = try runBaton(["db", "migrate", "--database-url", databaseURL])
            guard migrate.status == 0 else { throw TestSupportError("baton db migrate failed: \(migrate.stderr)") }
            let subs = people.map(\.oldSub).joined(separator: ",")
            _ = try TestDatabase.psql(databaseURL, """
                CREATE TABLE public.users (id bigserial PRIMARY KEY, apple_sub text UNIQUE, email text);
                INSERT INTO public.users (apple_sub, email)
                SELECT s, 'legacy.' || n || '@privaterelay.appleid.com' FROM unnest('{\(subs)}'::text[]) WITH ORDINALITY AS t(s, n);
                """)
            _ = try TestDatabase.psql(databaseURL, """
                INSERT INTO baton.transfers (old_sub, transfer_sub)
                SELECT * FROM unnest('{\(subs)}'::text[], '{\(people.map(\.transferSub).joined(separator: ","))}'::text[]);
                """)
        }
        let baseline = try await offPool { try LegacySnapshot.take(databaseURL) }
        return try FaultWorld(cluster: cluster, serverURL: serverURL, directory: directory, databaseName: databaseName, databaseURL: databaseURL,
                              people: people, baseline: baseline, emulator: emulator, sender: sender, recipient: recipient,
                              acceptedAt: acceptedAt)
    }

    // MARK: - Configuration

    /// Writes `baton.json` for this world and returns its path.
    /// - Parameter statementTimeoutMilliseconds: the service's `database.statement_timeout_ms`, if any.
    func writeConfiguration(statementTimeoutMilliseconds: Int? = nil) throws -> String {
        var database: [String: Any] = ["url": databaseURL, "pool_size": 4]
        if let statementTimeoutMilliseconds { database["statement_timeout_ms"] = statementTimeoutMilliseconds }
        let transfer: [String: Any] = [
            "client_id": FaultWorld.clientID,
            "accepted_at": ISO8601DateFormatter().string(from: acceptedAt),
            "sender": ["team_id": sender.teamID, "key_id": sender.keyID, "private_key_path": "sender.p8"],
            "recipient": ["team_id": recipient.teamID, "key_id": recipient.keyID, "private_key_path": "recipient.p8"],
        ]
        let tree: [String: Any] = [
            "listen": "127.0.0.1:\(servePort)",
            "database": database,
            "apple": ["base_url": "http://127.0.0.1:\(emulatorPort)", "client_ids": [FaultWorld.clientID], "transfer": transfer],
            "legacy": ["table": "public.users", "key_column": "id", "subject_column": "apple_sub", "email_column": "email"],
        ]
        try directory.write("baton.json", String(decoding: try JSONSerialization.data(withJSONObject: tree), as: UTF8.self))
        return directory.path("baton.json")
    }

    // MARK: - baton serve

    /// Starts `baton serve` with `configuration` and waits until `/healthz` answers.
    func startServe(configuration: String) async throws {
        let process = try runProcessAsync(batonBinaryPath, ["serve", "--config", configuration, "--log-level", "warning"])
        serveBox.withLock { $0 = process }
        for _ in 0..<300 {
            if await HTTPProbe.status("GET", port: servePort, path: "/healthz") == 200 { return }
            try await Task.sleep(for: .milliseconds(100))
        }
        let result = try await stopServe(signal: SIGKILL)
        throw TestSupportError("baton serve did not come up: \(result?.stderr ?? "")")
    }

    /// Sends `signal` to `baton serve` and waits for it to exit; nil when none runs.
    @discardableResult
    func stopServe(signal: Int32) async throws -> ProcessResult? {
        guard let process = serveBox.withLock({ current -> RunningProcess? in
            defer { current = nil }
            return current
        }) else { return nil }
        process.signal(signal)
        return try await offPool { try process.wait(timeout: 60) }
    }

    // MARK: - The emulator

    /// Stops the emulator's HTTP server (Apple unreachable); it keeps minting tokens in process.
    func emulatorDown() async {
        await emulator.stop()
    }

    /// Starts the emulator again on the same port from its state file (same teams, keys, transfer, tokens).
    func emulatorUp() async throws {
        let restarted = try await AppleEmulator.start(port: emulatorPort, statePath: directory.path("emulator-state.json"))
        emulatorBox.withLock { $0 = restarted }
    }

    /// An identity token for `person` from the receiving team's app, as a device gets after the transfer.
    func token(_ person: FaultPerson) throws -> String {
        try emulator.authorize(clientID: FaultWorld.clientID, user: person.id).idToken
    }

    // MARK: - SQL

    /// The scenario's own cluster; fails the scenario when it did not ask for one.
    var cluster: PrivateCluster {
        get throws {
            guard let privateCluster else { throw TestSupportError("this scenario runs on the shared cluster: pass privateCluster: true") }
            return privateCluster
        }
    }

    /// Runs SQL on the application's database through `psql`, off the cooperative pool.
    func psql(_ sql: String) async throws -> String {
        let url = databaseURL
        return try await offPool { try TestDatabase.psql(url, sql) }
    }

    /// An integer from SQL.
    func count(_ sql: String) async throws -> Int {
        let text = try await psql(sql)
        guard let value = Int(text) else { throw TestSupportError("not a count: \(text)") }
        return value
    }

    /// Runs the consistency check and records every violation as a test failure.
    func expectConsistent(_ sourceLocation: SourceLocation = #_sourceLocation) async throws {
        let violations = try await ConsistencyChecker(world: self).violations()
        #expect(violations.isEmpty, "consistency: \(violations.joined(separator: "; "))", sourceLocation: sourceLocation)
    }

    /// Users whose transfer is migrated.
    func migratedCount() async throws -> Int {
        try await count("SELECT count(*) FROM baton.transfers WHERE state = 'migrated'")
    }
}

/// A free TCP port on 127.0.0.1 (bound, read, released).
func freeLoopbackPort() throws -> Int {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    guard fd >= 0 else { throw TestSupportError("socket() failed") }
    defer { close(fd) }
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    address.sin_port = 0
    var length = socklen_t(MemoryLayout<sockaddr_in>.size)
    let bound = withUnsafeMutablePointer(to: &address) { pointer in
        pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) == 0 && getsockname(fd, $0, &length) == 0 }
    }
    guard bound else { throw TestSupportError("bind() failed") }
    return Int(UInt16(bigEndian: address.sin_port))
}
