import Baton
import Foundation
import BatonPostgres

/// `baton transfer-ids --export FILE.csv`: the sender's users for a recipient in another company, identified
/// by their transfer identifiers alone (Apple's rule: the sending team's identifiers and private relay
/// addresses stay with the sender).
///
/// One line per Apple row (`legacy.where`) that has a transfer identifier: `key,transfer_sub` and the columns
/// the operator names. The subject, email, transfer and JSON columns cannot be named, and a named column
/// whose value is a team-scoped identifier or a private relay address stops the export before the file is
/// complete (it is then removed). Rows stream in key order, a page at a time.
public struct TransferExporter: Sendable {
    /// What an export wrote.
    public struct Summary: Sendable, Equatable {
        /// Data lines written.
        public var rows = 0
    }

    private let pool: PostgresPool
    private let legacy: BatonConfiguration.LegacyIdentifiers
    private let columns: [PostgresIdentifier]
    private let pageSize: Int

    /// An exporter of `legacy`'s rows with the extra `columns`.
    /// - Throws: ``BulkJobError`` `invalidColumn` when a column is not an identifier, or is one of the columns
    ///   that hold identifiers or emails.
    public init(pool: PostgresPool, legacy: BatonConfiguration.LegacyIdentifiers, columns: [String], pageSize: Int = 5_000) throws {
        let forbidden = [legacy.subjectColumn, legacy.emailColumn, legacy.transferColumn, legacy.json?.column, legacy.keyColumn].compactMap { $0 }
        self.columns = try columns.map { name in
            guard let column = try? PostgresIdentifier(name), column.schema == nil else {
                throw BulkJobError(.invalidColumn, "--columns: '\(name)' is not a column name")
            }
            guard !forbidden.contains(column) else {
                throw BulkJobError(.invalidColumn, "--columns: \(name) is the key, or holds team-scoped identifiers or emails, which never leave the sender")
            }
            return column
        }
        self.pool = pool
        self.legacy = legacy
        self.pageSize = max(1, pageSize)
    }

    /// Writes the export to `path` (replacing it).
    /// - Throws: ``BulkJobError`` (`unreadableFile` when it cannot be written, `identifierInExport` when a
    ///   named column holds an identifier or relay address), ``PostgresError``.
    public func export(to path: String) async throws -> Summary {
        let writer = try LineWriter(path: path)
        do {
            let summary = try await write(to: writer)
            try await writer.close()
            return summary
        } catch {
            try? await writer.close()
            try? FileManager.default.removeItem(atPath: path)
            throw error
        }
    }

    private func write(to writer: LineWriter) async throws -> Summary {
        let l = legacy
        try await writer.write((["key", "transfer_sub"] + columns.map(\.name)).joined(separator: ",") + "\n")
        var summary = Summary()
        var after: String?
        let extra = columns.map { ", u.\($0.quoted)::text" }.joined()
        while true {
            var query: PostgresQuery = """
                SELECT u.\(l.keyColumn)::text, t.transfer_sub, \(unsafeRaw: l.subjectSQL())\(unsafeRaw: extra)
                FROM \(l.table) AS u JOIN baton.transfers AS t ON t.old_sub = \(unsafeRaw: l.subjectSQL())
                WHERE t.transfer_sub IS NOT NULL
                """
            query = query + l.filterSQL()
            if let after { query = query + " AND u.\(l.keyColumn) > \(after)" }
            let rows = try await pool.query(query + " ORDER BY u.\(l.keyColumn) LIMIT \(pageSize)")
            guard !rows.isEmpty else { return summary }
            var text = ""
            for row in rows {
                let key = try row.decode(String.self, at: 0)
                let subject = try row.decode(String.self, at: 2)
                var fields = [key, try row.decode(String.self, at: 1)]
                for (index, column) in columns.enumerated() {
                    let value = try row.decode(String?.self, at: 3 + index) ?? ""
                    if value == subject || value.lowercased().contains(LegacyStore.privateRelayDomain) {
                        throw BulkJobError(.identifierInExport, "column \(column.name) of the row with key \(key) holds a team-scoped identifier or a private relay address: leave it out of --columns")
                    }
                    fields.append(value)
                }
                text += fields.map(TransferExporter.csvField).joined(separator: ",") + "\n"
                after = key
            }
            try await writer.write(text)
            summary.rows += rows.count
        }
    }

    /// `value` as a CSV field (RFC 4180): quoted when it holds a comma, a quote or a line break.
    static func csvField(_ value: String) -> String {
        guard value.contains(where: { $0 == "," || $0 == "\"" || $0 == "\n" || $0 == "\r" }) else { return value }
        return "\"" + value.replacingOccurrences(of: "\"", with: "\"\"") + "\""
    }
}

/// Appends text to a file on a dedicated queue, never on Swift's cooperative threads.
package final class LineWriter: @unchecked Sendable {
    // `@unchecked Sendable`: the handle is used only from `queue`, one call at a time.
    private let handle: FileHandle
    private let queue = DispatchQueue(label: "baton.export.writer")

    package init(path: String) throws {
        guard FileManager.default.createFile(atPath: path, contents: nil, attributes: [.posixPermissions: 0o600]),
              let handle = FileHandle(forWritingAtPath: path) else {
            throw BulkJobError(.unreadableFile, "cannot write \(path)")
        }
        self.handle = handle
    }

    package func write(_ text: String) async throws {
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
            queue.async { [handle] in continuation.resume(with: Result { try handle.write(contentsOf: Data(text.utf8)) }) }
        }
    }

    package func close() async throws {
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
            queue.async { [handle] in continuation.resume(with: Result { try handle.close() }) }
        }
    }
}
