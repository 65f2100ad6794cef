import BatonCommandLine
import BatonConcurrency
import BatonProcess
import Foundation
import Synchronization

/// A PostgreSQL cluster of the rehearsal's own, as `scripts/pg.sh` makes them: `initdb` in a fresh temporary
/// directory (as the `postgres` user when running as root), a private Unix socket and no TCP, durability off;
/// a quarter of the machine's memory as shared buffers (``sharedBuffersMiB``) and no checkpoint before 16 GB of WAL,
/// so more of the users' rows, the queue and their indexes stay in PostgreSQL's own cache (all of them at a million).
/// ``destroy()`` stops it and deletes the directory; callers call it on every path.
final class ThrowawayCluster: Sendable {
    /// The directory holding the data, the socket and the logs.
    let directory: String
    /// The connection URL (socket in ``directory``).
    let url: String
    private let bin: String

    private init(directory: String, url: String, bin: String) {
        self.directory = directory
        self.url = url
        self.bin = bin
    }

    /// `shared_buffers` in MiB: a quarter of physical memory (PostgreSQL's own starting advice), 1 to 8 GiB. Baton's
    /// tables and the copy's take about 1.4 GB per million users, so a fixed 1 GB held less than a tenth of them at
    /// ten million.
    static var sharedBuffersMiB: Int {
        min(8_192, max(1_024, Int(ProcessInfo.processInfo.physicalMemory / 4 / 1_048_576)))
    }

    /// The newest `/usr/lib/postgresql/*/bin`, or nil.
    static func serverBinaries() -> String? {
        let root = "/usr/lib/postgresql"
        let versions = (try? FileManager.default.contentsOfDirectory(atPath: root)) ?? []
        guard let newest = versions.compactMap({ Int($0) }).max() else { return nil }
        let bin = "\(root)/\(newest)/bin"
        return FileManager.default.fileExists(atPath: "\(bin)/initdb") ? bin : nil
    }

    /// Starts a cluster; on failure nothing is left behind.
    /// - Throws: ``CommandFailure/failed(_:)`` naming the step and its log.
    static func start() async throws -> ThrowawayCluster {
        guard let bin = serverBinaries() else {
            throw CommandFailure.failed("baton rehearse: PostgreSQL server binaries not found under /usr/lib/postgresql (scripts/install-deps.sh installs them)")
        }
        return try await offPool {
            // In /tmp, not $TMPDIR: as root the server runs as `postgres`, which must reach the directory.
            let directory = "/tmp/baton-rehearse.\(UUID().uuidString.prefix(8))"
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: false, attributes: [.posixPermissions: 0o700])
            let port = Int.random(in: 20_000...60_000)
            let cluster = ThrowawayCluster(directory: directory, url: "postgresql://postgres@/postgres?host=\(directory)&port=\(port)", bin: bin)
            running.withLock { $0[ObjectIdentifier(cluster)] = cluster }
            do {
                if getuid() == 0 { try run("/bin/chown", ["postgres:", directory]) }
                try cluster.asOwner("\(bin)/initdb", ["-D", "\(directory)/data", "-U", "postgres", "-A", "trust", "-E", "UTF8", "--locale=C.UTF-8", "--no-sync"],
                                    log: "\(directory)/initdb.log")
                try cluster.asOwner("\(bin)/pg_ctl", ["-D", "\(directory)/data", "-l", "\(directory)/server.log", "-w", "-t", "60", "-o",
                                                      "-k \(directory) -p \(port) -c listen_addresses= -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=200 "
                                                      + "-c shared_buffers=\(sharedBuffersMiB)MB -c wal_level=minimal -c max_wal_senders=0 -c max_wal_size=16GB -c checkpoint_timeout=1h -c jit=off",
                                                      "start"], log: "\(directory)/pg_ctl.log")
                return cluster
            } catch {
                cluster.destroySync()
                throw error
            }
        }
    }

    /// The clusters started and not yet destroyed, for ``destroyRunning()``.
    private static let running = Mutex<[ObjectIdentifier: ThrowawayCluster]>([:])

    /// Stops the server at once and deletes the directory.
    func destroy() async {
        await offPool { self.destroySync() }
    }

    /// Destroys every cluster still running (on SIGINT or SIGTERM, before the process exits).
    static func destroyRunning() async {
        let clusters = running.withLock { Array($0.values) }
        await offPool { for cluster in clusters { cluster.destroySync() } }
    }

    private func destroySync() {
        _ = Self.running.withLock { $0.removeValue(forKey: ObjectIdentifier(self)) }
        if FileManager.default.fileExists(atPath: "\(directory)/data/postmaster.pid") {
            try? asOwner("\(bin)/pg_ctl", ["-D", "\(directory)/data", "-m", "immediate", "-w", "stop"], log: nil)
        }
        try? FileManager.default.removeItem(atPath: directory)
    }

    private func asOwner(_ tool: String, _ arguments: [String], log: String?) throws {
        if getuid() == 0 {
            try Self.run("/usr/sbin/runuser", ["-u", "postgres", "--", tool] + arguments, log: log)
        } else {
            try Self.run(tool, arguments, log: log)
        }
    }

    /// Runs `tool` and waits (a ``ChildProcess``; blocks). Standard error goes to `log` (nil discards it), quoted
    /// in the error when the tool fails; standard output to `standardOutput`, else to the log. Files are created
    /// in the cluster's own directory.
    static func run(_ tool: String, _ arguments: [String], log: String? = nil, environment: [String: String]? = nil,
                    standardOutput: String? = nil) throws {
        let name = (tool as NSString).lastPathComponent
        let logStream: ChildProcess.Stream = log.map { .file($0) } ?? .discard
        let child: ChildProcess
        do {
            child = try ChildProcess(tool, arguments, environment: environment, standardOutput: standardOutput.map { .file($0) } ?? logStream,
                                     standardError: standardOutput == nil ? .standardOutput : logStream)
        } catch {
            throw ToolFailure(tool: name, status: -1, output: error.description)
        }
        let status = child.waitForExit()
        guard status == 0 else {
            let text = log.flatMap { try? String(contentsOfFile: $0, encoding: .utf8) } ?? ""
            throw ToolFailure(tool: name, status: Int(status), output: text.trimmingCharacters(in: .whitespacesAndNewlines))
        }
    }
}

/// A helper program that exited with a failure status.
struct ToolFailure: Error, CustomStringConvertible {
    /// The program's name.
    var tool: String
    /// Its exit status.
    var status: Int
    /// What it wrote to standard error (its log).
    var output: String

    var description: String { "\(tool) exited with status \(status): \(output.split(separator: "\n").suffix(3).joined(separator: " | "))" }
}
