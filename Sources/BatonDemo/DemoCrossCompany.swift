import Baton
import BatonJobs
import Foundation
import BatonPostgres

/// Where the recipient's half of the demo runs: the same database (one company), or a database of its own
/// holding only transfer identifiers (`--cross-company`).
struct DemoRecipient: Sendable {
    /// Its pool (the demo's own pool in the one-company story).
    var pool: PostgresPool
    /// Its database URL, for the service.
    var url: String
    /// Its legacy table.
    var legacy: BatonConfiguration.Legacy
    /// SQL counting its Apple rows, and those carrying a migrated user's new identifier.
    var appleRows: String
    var rewrittenRows: String
    /// The database created for it, dropped at the end (nil in the one-company story).
    var database: String?
}

extension DemoScenario {
    /// The recipient's table between companies: its own keys, the transfer identifier, no subject, no email.
    static let recipientLegacy = BatonConfiguration.Legacy(table: "public.accounts", keyColumn: "id", subjectColumn: "apple_sub",
                                                           emailColumn: "email", transferColumn: "transfer_sub", emailPolicy: .always)

    /// The hand-over between two companies, printed as part of step 5: team A exports keys and transfer
    /// identifiers only (`baton transfer-ids --export`); team B loads them into a database of its own with NULL
    /// subjects and imports `key,transfer_sub` (`baton import transfers`).
    func handOver(pool: PostgresPool, legacy: BatonConfiguration.LegacyIdentifiers) async throws -> DemoRecipient {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("baton-demo-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let export = directory.appendingPathComponent("export.csv").path
        let exported = try await TransferExporter(pool: pool, legacy: legacy, columns: []).export(to: export)
        let lines = try await readLines(export)
        let oldSubjects = try await pool.query("SELECT count(*) FROM baton.transfers WHERE position(old_sub IN \(lines.joined(separator: "\n"))) > 0")[0]
            .decode(Int.self, at: 0)
        output.line("between two companies: team A runs baton transfer-ids --export users.csv → \(DemoFormat.count(exported.rows)) lines of key,transfer_sub; \(oldSubjects) team A identifiers and \(lines.filter { $0.lowercased().contains("privaterelay") }.count) relay addresses in it")

        let current = try await pool.query("SELECT current_database()")[0].decode(String.self, at: 0)
        let name = try PostgresIdentifier(String((current + "_recipient").prefix(63)))
        try await pool.execute("CREATE DATABASE \(name)")
        let url = options.databaseURL + (options.databaseURL.contains("?") ? "&" : "?") + "dbname=\(name.name)"
        let recipient = PostgresPool(url: url, maxConnections: options.concurrency + 4)
        do {
            _ = try await BatonSchema.migrator().migrate(recipient)
            try await recipient.execute("""
                CREATE TABLE public.accounts (id text PRIMARY KEY, apple_sub text UNIQUE, email text UNIQUE, transfer_sub text UNIQUE)
                """)
            let rows = lines.dropFirst().map { $0.split(separator: ",", maxSplits: 1).map(String.init) }.filter { $0.count == 2 }
            try await recipient.execute("""
                INSERT INTO public.accounts (id, transfer_sub)
                SELECT 'acct-' || k, t FROM unnest(string_to_array(\(rows.map { $0[0] }.joined(separator: "\n")), E'\\n'),
                                                   string_to_array(\(rows.map { $0[1] }.joined(separator: "\n")), E'\\n')) AS r(k, t)
                """)
            let keys = directory.appendingPathComponent("keys.csv").path
            try await writeText(keys, ([TransferImporter.keyHeader] + rows.map { "acct-\($0[0]),\($0[1])" }).joined(separator: "\n") + "\n")
            let imported = try await TransferImporter(pool: recipient).importFile(path: keys) { _ in }
            output.line("team B loads them into its own database \(name.name): public.accounts with NULL subjects and the transfer identifier in transfer_sub")
            output.line("team B runs baton import transfers keys.csv (header key,transfer_sub): \(DemoFormat.count(imported.loaded)) rows in baton.transfers, none with an old_sub")
        } catch {
            await recipient.close()
            throw error
        }
        return DemoRecipient(pool: recipient, url: url, legacy: DemoScenario.recipientLegacy,
                             appleRows: "SELECT count(*) FROM public.accounts",
                             rewrittenRows: "SELECT count(*) FROM public.accounts u JOIN baton.transfers t ON t.new_sub = u.apple_sub AND t.state = 'migrated'",
                             database: name.name)
    }

    /// Closes the recipient's pool and drops its database, unless asked to keep it.
    func dropRecipient(_ recipient: DemoRecipient, mainPool: PostgresPool) async throws {
        guard let database = recipient.database else { return }
        await recipient.pool.close()
        guard !options.keepData else {
            output.line("kept the recipient's database \(database) (--keep-data)")
            return
        }
        try await mainPool.execute("DROP DATABASE \(try PostgresIdentifier(database))")
        output.line("dropped the recipient's database \(database)")
    }

    private func readLines(_ path: String) async throws -> [String] {
        try await withCheckedThrowingContinuation { continuation in
            DispatchQueue.global().async {
                continuation.resume(with: Result {
                    try String(contentsOfFile: path, encoding: .utf8).split(separator: "\n").map(String.init)
                })
            }
        }
    }

    private func writeText(_ path: String, _ text: String) async throws {
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
            DispatchQueue.global().async {
                continuation.resume(with: Result { try Data(text.utf8).write(to: URL(fileURLWithPath: path)) })
            }
        }
    }
}
