import Baton
import BatonConcurrency
import Foundation
import BatonLogging
import BatonPostgres

/// Reads a file line by line on a dedicated queue (never on Swift's cooperative threads), a batch of lines
/// per call, so a file of any size needs the memory of one batch.
package final class LineReader: @unchecked Sendable {
    // `@unchecked Sendable`: the FILE handle is used only from `queue`, one call at a time.
    private let file: UnsafeMutablePointer<FILE>
    private let queue = DispatchQueue(label: "baton.import.reader")

    package init(path: String) throws {
        guard let file = fopen(path, "r") else {
            throw BulkJobError(.unreadableFile, "cannot open \(path): \(String(cString: strerror(errno)))")
        }
        self.file = file
    }

    deinit { fclose(file) }

    /// Up to `count` lines without their line ends (`\n` or `\r\n`); empty at the end of the file.
    package func next(_ count: Int) async throws -> [String] {
        try await offPool(on: queue) { [self] () throws(BulkJobError) -> [String] in
            var lines: [String] = []
            lines.reserveCapacity(count)
            var buffer: UnsafeMutablePointer<CChar>?
            var capacity = 0
            defer { free(buffer) }
            while lines.count < count {
                let length = getline(&buffer, &capacity, self.file)
                if length < 0 {
                    if ferror(self.file) != 0 {
                        throw BulkJobError(.unreadableFile, "cannot read the file: \(String(cString: strerror(errno)))")
                    }
                    break
                }
                var end = length
                while end > 0, buffer![end - 1] == 10 || buffer![end - 1] == 13 { end -= 1 }
                lines.append(buffer!.withMemoryRebound(to: UInt8.self, capacity: end) {
                    String(decoding: UnsafeBufferPointer(start: $0, count: end), as: UTF8.self)
                })
            }
            return lines
        }
    }
}

/// `baton import transfers FILE.csv`: loads `old_sub,transfer_sub` pairs (one company) or `key,transfer_sub`
/// pairs (between companies: the recipient's key of each row loaded from the sender's export) into
/// `baton.transfers`.
///
/// Every line is checked; rejected lines are reported with their numbers and reasons, and the rest are loaded
/// in one transaction. The file streams through a temporary table in batches, so a 1,000,000-line file needs
/// little memory; duplicates inside the file and conflicts with rows already stored are found by PostgreSQL.
/// Importing the same file again changes nothing (its pairs are reported as already present).
public struct TransferImporter: Sendable {
    /// What an import did.
    public struct Summary: Sendable, Equatable {
        /// Data lines read (the header excluded).
        public var lines = 0
        /// Pairs added (new rows, or a transfer identifier given to a row that had none).
        public var loaded = 0
        /// Pairs already stored exactly so.
        public var alreadyPresent = 0
        /// Lines rejected.
        public var rejected = 0
    }

    /// A rejected line.
    public struct Rejection: Sendable, Equatable {
        /// The 1-based line number in the file (the header is line 1).
        public var line: Int
        /// Why it was rejected.
        public var reason: String
    }

    /// The header of the same-company form (both teams' data in one database).
    public static let header = "old_sub,transfer_sub"
    /// The header of the cross-company form: the recipient's own key for the row loaded from the sender's
    /// export (`baton transfer-ids --export`), never the sender's identifier.
    public static let keyHeader = "key,transfer_sub"

    /// Which of the two forms a file is in.
    enum Form {
        case oldSub, key
        /// The file's first column, and the `baton.transfers` column it fills.
        var column: String { self == .oldSub ? "old_sub" : "legacy_key" }
        var name: String { self == .oldSub ? "old_sub" : "key" }
    }
    /// The longest identifier accepted.
    public static let maxIdentifierLength = 256

    private let pool: PostgresPool
    private let batchSize: Int
    private let throttle: JobThrottle?

    /// An importer writing through `pool`; `batchSize` lines travel per statement (default 5,000). With a
    /// `throttle`, it waits before its transaction and between its batches while the database is busy, holding its
    /// transaction open meanwhile (``JobThrottle/waitUntilClear(isStopped:)``).
    public init(pool: PostgresPool, batchSize: Int = 5_000, throttle: JobThrottle? = nil) {
        self.pool = pool
        self.batchSize = max(1, batchSize)
        self.throttle = throttle
    }

    /// Why `line` is not a valid `old_sub,transfer_sub` pair, or the pair.
    public static func parse(_ line: String, first: String = "old_sub") -> Result<(oldSub: String, transferSub: String), ParseProblem> {
        let fields = line.split(separator: ",", omittingEmptySubsequences: false)
        guard fields.count == 2 else { return .failure(ParseProblem("expected 2 fields, found \(fields.count)")) }
        for (index, field) in fields.enumerated() {
            let name = index == 0 ? first : "transfer_sub"
            if field.isEmpty { return .failure(ParseProblem("\(name) is empty")) }
            if field.utf8.count > maxIdentifierLength { return .failure(ParseProblem("\(name) is longer than \(maxIdentifierLength) characters")) }
            let allowed = field.utf8.allSatisfy { byte in
                (0x30...0x39).contains(byte) || (0x41...0x5A).contains(byte) || (0x61...0x7A).contains(byte) || byte == 0x2E || byte == 0x5F || byte == 0x2D
            }
            if !allowed { return .failure(ParseProblem("\(name) holds a character other than letters, digits, '.', '_' and '-'")) }
        }
        if fields[0] == fields[1] { return .failure(ParseProblem("\(first) and transfer_sub are the same")) }
        return .success((String(fields[0]), String(fields[1])))
    }

    /// Why a line was refused by ``parse(_:)``. Returned per line, never thrown: a refused line is reported and the
    /// import goes on, so it is no ``BulkJobError``.
    public struct ParseProblem: Error, Equatable {
        /// The reason, for the operator.
        public let reason: String
        init(_ reason: String) { self.reason = reason }
    }

    /// Imports `path`; `reject` receives each rejected line in line order after the checks.
    /// - Parameter dryRun: check everything and report, then roll back.
    /// - Throws: ``BulkJobError`` (`unreadableFile`, `missingHeader`), ``PostgresError``.
    public func importFile(path: String, dryRun: Bool = false, reject: @Sendable (Rejection) -> Void) async throws -> Summary {
        let reader = try LineReader(path: path)
        guard var first = try await reader.next(1).first else {
            throw BulkJobError(.missingHeader, "the file is empty: its first line must be '\(TransferImporter.header)'")
        }
        if first.hasPrefix("\u{FEFF}") { first.removeFirst() }
        let form: Form
        switch first.trimmingCharacters(in: .whitespaces) {
        case TransferImporter.header: form = .oldSub
        case TransferImporter.keyHeader: form = .key
        default:
            throw BulkJobError(.missingHeader, "the first line must be the header '\(TransferImporter.header)' (one company) or '\(TransferImporter.keyHeader)' (between companies)")
        }
        guard let throttle else { return try await load(reader: reader, form: form, dryRun: dryRun, reject: reject) }
        return try await throttle.monitoring { try await load(reader: reader, form: form, dryRun: dryRun, reject: reject) }
    }

    /// The import's one transaction.
    private func load(reader: LineReader, form: Form, dryRun: Bool, reject: @Sendable (Rejection) -> Void) async throws -> Summary {
        await throttle?.waitUntilClear()
        return try await pool.withConnection { connection in
            try await connection.query("BEGIN")
            do {
                let summary = try await load(reader: reader, form: form, connection: connection, reject: reject)
                try await connection.query(dryRun ? "ROLLBACK" : "COMMIT")
                return summary
            } catch {
                _ = try? await connection.query("ROLLBACK")
                throw error
            }
        }
    }

    private func load(reader: LineReader, form: Form, connection: PostgresConnection, reject: @Sendable (Rejection) -> Void) async throws -> Summary {
        try await connection.executeScript(unsafeSQL: """
            CREATE TEMPORARY TABLE import_rows (line bigint PRIMARY KEY, old_sub text NOT NULL, transfer_sub text NOT NULL) ON COMMIT DROP;
            CREATE TEMPORARY TABLE import_rejects (line bigint PRIMARY KEY, reason text NOT NULL) ON COMMIT DROP;
            """)
        var summary = Summary()
        var lineNumber = 1
        while true {
            let lines = try await reader.next(batchSize)
            if lines.isEmpty { break }
            await throttle?.waitUntilClear()
            var numbers: [String] = [], olds: [String] = [], transfers: [String] = []
            var rejectNumbers: [String] = [], reasons: [String] = []
            for line in lines {
                lineNumber += 1
                summary.lines += 1
                if line.isEmpty {
                    rejectNumbers.append(String(lineNumber)); reasons.append("empty line")
                    continue
                }
                switch Self.parse(line, first: form.name) {
                case .success(let pair):
                    numbers.append(String(lineNumber)); olds.append(pair.oldSub); transfers.append(pair.transferSub)
                case .failure(let problem):
                    rejectNumbers.append(String(lineNumber)); reasons.append(problem.reason)
                }
            }
            if !numbers.isEmpty {
                try await connection.execute("""
                    INSERT INTO import_rows (line, old_sub, transfer_sub)
                    SELECT * FROM unnest(\(arrayLiteral(numbers))::bigint[], \(arrayLiteral(olds))::text[], \(arrayLiteral(transfers))::text[])
                    """)
            }
            if !rejectNumbers.isEmpty {
                try await connection.execute("""
                    INSERT INTO import_rejects (line, reason)
                    SELECT * FROM unnest(\(arrayLiteral(rejectNumbers))::bigint[], \(arrayLiteral(reasons))::text[])
                    """)
            }
        }
        // Repeats inside the file, then conflicts with what is stored; each line gets its first reason only.
        let name = form.name, column = form.column
        var checks = """
            INSERT INTO import_rejects (line, reason)
            SELECT line, '\(name) repeats line ' || first_line FROM (
                SELECT line, min(line) OVER (PARTITION BY old_sub) AS first_line FROM import_rows) r
            WHERE line <> first_line
            ON CONFLICT (line) DO NOTHING;
            INSERT INTO import_rejects (line, reason)
            SELECT line, 'transfer_sub repeats line ' || first_line FROM (
                SELECT line, min(line) OVER (PARTITION BY transfer_sub) AS first_line FROM import_rows) r
            WHERE line <> first_line
            ON CONFLICT (line) DO NOTHING;
            INSERT INTO import_rejects (line, reason)
            SELECT i.line, '\(name) already has another transfer_sub' FROM import_rows i
            JOIN baton.transfers t ON t.\(column) = i.old_sub
            WHERE t.transfer_sub IS NOT NULL AND t.transfer_sub <> i.transfer_sub
            ON CONFLICT (line) DO NOTHING;
            INSERT INTO import_rejects (line, reason)
            SELECT i.line, 'transfer_sub already belongs to another \(name)' FROM import_rows i
            JOIN baton.transfers t ON t.transfer_sub = i.transfer_sub
            WHERE t.\(column) IS DISTINCT FROM i.old_sub
            ON CONFLICT (line) DO NOTHING;

            """
        if form == .oldSub {
            checks += """
                INSERT INTO import_rejects (line, reason)
                SELECT i.line, 'old_sub is already a recipient-team identifier (migrated)' FROM import_rows i
                JOIN baton.transfers t ON t.new_sub = i.old_sub
                ON CONFLICT (line) DO NOTHING;

                """
        }
        try await connection.executeScript(unsafeSQL: checks + "DELETE FROM import_rows i USING import_rejects r WHERE r.line = i.line;")
        let present = try await connection.query("""
            SELECT count(*) FROM import_rows i JOIN baton.transfers t ON t.\(unsafeRaw: column) = i.old_sub AND t.transfer_sub = i.transfer_sub
            """)
        summary.alreadyPresent = try present[0].decode(Int.self, at: 0)
        // The rows go in a batch of lines at a time, so the throttle can hold the writes between them (the repeats
        // were rejected above: no batch conflicts with another).
        var first = 2
        while first <= lineNumber {
            await throttle?.waitUntilClear()
            let last = first + batchSize - 1
            if form == .oldSub {
                summary.loaded += try await connection.execute("""
                    INSERT INTO baton.transfers AS t (old_sub, transfer_sub)
                    SELECT old_sub, transfer_sub FROM import_rows WHERE line BETWEEN \(first) AND \(last) ORDER BY line
                    ON CONFLICT (old_sub) DO UPDATE SET transfer_sub = EXCLUDED.transfer_sub, updated_at = now()
                    WHERE t.transfer_sub IS NULL
                    """)
            } else {
                summary.loaded += try await connection.execute("""
                    INSERT INTO baton.transfers (legacy_key, transfer_sub)
                    SELECT i.old_sub, i.transfer_sub FROM import_rows i
                    WHERE i.line BETWEEN \(first) AND \(last)
                      AND NOT EXISTS (SELECT 1 FROM baton.transfers t WHERE t.transfer_sub = i.transfer_sub)
                    ORDER BY i.line
                    """)
            }
            first = last + 1
        }
        if summary.loaded > 0 {
            try await connection.execute("""
                INSERT INTO baton.events (kind, detail) VALUES ('transfers_imported', jsonb_build_object('rows', \(summary.loaded)))
                """)
        }
        // Report the rejects in line order, a page at a time.
        var after = 0
        while true {
            let page = try await connection.query("SELECT line, reason FROM import_rejects WHERE line > \(after) ORDER BY line LIMIT 10000")
            if page.isEmpty { break }
            for row in page {
                let rejection = Rejection(line: try row.decode(Int.self, at: 0), reason: try row.decode(String.self, at: 1))
                reject(rejection)
                after = rejection.line
                summary.rejected += 1
            }
        }
        return summary
    }
}

/// A PostgreSQL array literal (`{"a","b"}`) of `values`, bound as one text parameter and cast in SQL.
func arrayLiteral(_ values: [String]) -> String {
    var text = "{"
    text.reserveCapacity(values.count * 24)
    for (index, value) in values.enumerated() {
        if index > 0 { text += "," }
        text += "\""
        for character in value.unicodeScalars {
            if character == "\"" || character == "\\" { text += "\\" }
            text.unicodeScalars.append(character)
        }
        text += "\""
    }
    return text + "}"
}
