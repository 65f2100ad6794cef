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
    static let clientID = EmulatedTransfer.clientID

    /// The scenario's own cluster, when it asked for one.
    let privateCluster: PrivateCluster?
    /// The scenario's primary and synchronous standby, when it asked for a failover.
    let failoverPair: FailoverPair?
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
    /// The app's transfer, accepted.
    let transfer: EmulatedTransfer
    private let emulatorBox: Mutex<AppleEmulator?>
    private let serveBox = Mutex<RunningProcess?>(nil)

    /// The running emulator (or the last one, while it is down: it can still mint tokens in process).
    var emulator: AppleEmulator { emulatorBox.withLock { $0! } }

    private init(cluster: PrivateCluster?, failoverPair: FailoverPair?, serverURL: String, directory: KeyDirectory, databaseName: String, databaseURL: String,
                 people: [FaultPerson], baseline: LegacySnapshot, emulator: AppleEmulator, transfer: EmulatedTransfer) throws {
        self.transfer = transfer
        self.privateCluster = cluster
        self.failoverPair = failoverPair
        self.serverURL = serverURL
        self.directory = directory
        self.databaseName = databaseName
        self.databaseURL = databaseURL
        self.people = people
        self.baseline = baseline
        self.emulatorBox = Mutex(emulator)
        self.emulatorPort = emulator.port
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
    ///   - failover: a primary and a synchronous streaming standby of the scenario's own, reached through a
    ///     multi-host URL with `target_session_attrs=read-write` (``databaseURL``, the services' and psql's alike).
    static func run(users: Int, privateCluster: Bool = false, tablespace: String? = nil, failover: Bool = false,
                    _ body: (FaultWorld) async throws -> Void) async throws {
        let cluster = privateCluster ? try await offPool { try PrivateCluster() } : nil
        let pair: FailoverPair?
        do {
            pair = failover ? try await offPool { try FailoverPair() } : nil
        } catch {
            try? await offPool { try cluster?.destroy() }
            throw error
        }
        let directory = try KeyDirectory()
        let statePath = directory.path("emulator-state.json")
        let emulator: AppleEmulator
        do {
            emulator = try await AppleEmulator.start(statePath: statePath)
        } catch {
            try? await offPool { try cluster?.destroy() }
            try? await offPool { try pair?.destroy() }
            directory.remove()
            throw error
        }
        var world: FaultWorld?
        do {
            world = try await build(cluster: cluster, failoverPair: pair, directory: directory, emulator: emulator, users: users, tablespace: tablespace)
            try await body(world!)
        } catch {
            await teardown(world, cluster: cluster, failoverPair: pair, directory: directory, emulator: emulator)
            throw error
        }
        await teardown(world, cluster: cluster, failoverPair: pair, directory: directory, emulator: emulator)
    }

    private static func teardown(_ world: FaultWorld?, cluster: PrivateCluster?, failoverPair: FailoverPair?, directory: KeyDirectory,
                                 emulator: AppleEmulator) async {
        if let world {
            _ = try? await world.stopServe(signal: SIGKILL)
            await world.emulator.stop()
        } else {
            await emulator.stop()
        }
        try? await offPool { try cluster?.destroy() }
        try? await offPool { try failoverPair?.destroy() }
        directory.remove()
    }

    private static func build(cluster: PrivateCluster?, failoverPair: FailoverPair?, directory: KeyDirectory, emulator: AppleEmulator, users count: Int,
                              tablespace: String?) async throws -> FaultWorld {
        let transfer = try EmulatedTransfer(on: emulator, users: count, privateEmail: true)
        let people = try transfer.users.map { user in
            FaultPerson(id: user.id, oldSub: user.userIdentifier, transferSub: transfer.transferIdentifiers[user.userIdentifier]!,
                        newSub: try emulator.authorize(clientID: clientID, user: user.id).userIdentifier)
        }
        try transfer.writeKeys(to: directory)

        let serverURL = try failoverPair?.primaryURL ?? cluster?.url ?? TestDatabase.serverURL()
        let databaseName = "faults_\(UUID().uuidString.prefix(8).lowercased())"
        let databaseURL = failoverPair?.multiHostURL(database: databaseName) ?? TestDatabase.url(serverURL, database: databaseName)
        try await offPool {
            if let tablespace {
                _ = try TestDatabase.psql(serverURL, "CREATE TABLESPACE tiny LOCATION '\(tablespace)'")
                _ = try TestDatabase.psql(serverURL, "CREATE DATABASE \(databaseName) TABLESPACE tiny")
            } else {
                _ = try TestDatabase.psql(serverURL, "CREATE DATABASE \(databaseName)")
            }
        }
        try await migrateWithBaton(databaseURL)
        try await offPool {
            let subjects = people.map(\.oldSub)
            try TestDatabase.createUsersTable(databaseURL, subjects: subjects, emails: subjects.indices.map { "legacy.\($0 + 1)@privaterelay.appleid.com" })
            try TestDatabase.addTransfers(databaseURL, transfer.transferIdentifiers)
        }
        // Only now does every commit wait for the standby: loading the data needs no second copy acknowledged.
        try await offPool { try failoverPair?.makeSynchronous() }
        let baseline = try await offPool { try LegacySnapshot.take(databaseURL) }
        return try FaultWorld(cluster: cluster, failoverPair: failoverPair, serverURL: serverURL, directory: directory, databaseName: databaseName, databaseURL: databaseURL,
                              people: people, baseline: baseline, emulator: emulator, transfer: transfer)
    }

    // MARK: - Configuration

    /// Writes `baton.json` for this world and returns its path.
    /// - Parameters:
    ///   - statementTimeoutMilliseconds: the service's `database.statement_timeout_ms`, if any.
    ///   - port: the listen port (default ``servePort``), written to `baton-PORT.json` when given (a second replica).
    func writeConfiguration(statementTimeoutMilliseconds: Int? = nil, port: Int? = nil) throws -> String {
        var tree = transfer.configuration(databaseURL: databaseURL, appleBaseURL: URL(string: "http://127.0.0.1:\(emulatorPort)")!)
        var database: [String: Any] = ["url": databaseURL, "pool_size": 4]
        if let statementTimeoutMilliseconds { database["statement_timeout_ms"] = statementTimeoutMilliseconds }
        tree["database"] = database
        tree["listen"] = "127.0.0.1:\(port ?? servePort)"
        return try directory.writeJSON(port.map { "baton-\($0).json" } ?? "baton.json", tree)
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
