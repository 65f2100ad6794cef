import BatonConcurrency
import BatonCommandLine
import Baton
import BatonReport
import Foundation
import BatonPostgres

/// `baton report`: the correlation report as a table, CSV, JSON or a self-contained HTML page.
let reportCommand = Command(
    name: "report",
    summary: "the correlation report: totals, pace against day 60, failures, unresolved users (table, csv, json, html)",
    options: ReportOptions.self,
    discussion: """
    Every figure is counted by PostgreSQL (GROUP BY); only the unresolved users listed are read.
    Exit status: 0 written, 1 the database failed, 2 usage or configuration errors.
    """,
    run: { parsed in
        let format = parsed.format
        let unmasked = parsed.unmasked
        if unmasked && (format == .table || format == .html) {
            throw CommandFailure.usage("--unmasked applies to csv and json only: the table and the page always mask emails")
        }
        let limit = parsed.limit
        let now = try parsed.now.map { try parseTime($0, option: "now") } ?? Date()
        let configuration = try await loadConfiguration(parsed.config)
        let acceptedAt = try parsed.acceptedAt.map { try parseTime($0, option: "accepted-at") }
            ?? configuration.apple.transfer?.acceptedAt

        let listLimit: Int
        switch format {
        case .table: listLimit = limit ?? MigrationReport.tableListLimit
        case .csv: listLimit = limit ?? Int.max
        case .json, .html: listLimit = limit ?? ReportBuilder.defaultLimit
        }
        let output = try ReportOutput(path: parsed.out, private: unmasked)
        let pool = configuration.database.pool(maxConnections: 1)
        let builder = ReportBuilder(
            pool: pool, legacy: configuration.legacy, acceptedAt: acceptedAt, now: now,
            limit: format == .csv ? 0 : listLimit, emails: unmasked ? .unmasked : .masked
        )
        do {
            try await writeReport(builder, format: format, listLimit: listLimit, to: output)
            try await output.close()
            await pool.close()
        } catch {
            try? await output.close()
            await pool.close()
            switch error {
            case let error as PostgresError: throw CommandFailure.failed("baton report: \(error)")
            case let error as ConfigurationError: throw CommandFailure.usage(error.description)
            default: throw error
            }
        }
        if let path = parsed.out {
            print("report: wrote \(path) (\(format.rawValue))")
        }
        return 0
    }
)

/// The options of `baton report`.
private struct ReportOptions: CommandOptions {
    let format = Option.choice("format", default: ReportFormat.table, """
        table for a terminal; csv: the unresolved users for a mailer; json: the
        report as GET /v1/report returns it; html: one self-contained page with charts
        """)
    let out = Option.text("out", "FILE", "write to FILE instead of standard output")
    let config = Option.config
    let limit = Option.integer("limit", in: 0...Int(Int32.max), "unresolved users to list; default 20 (table), 100 (html, json), every one (csv)")
    let unmasked = Option.flag("unmasked", """
        CSV and JSON carry the stored email addresses instead of masked ones (j***@example.com);
        the table and the page always mask them. With --out the file is created private (0600).
        """)
    let now = Option.text("now", "TIME", "the report's clock (ISO 8601 like 2026-12-31T00:00:00Z, or UNIX seconds); default now")
    let acceptedAt = Option.text("accepted-at", "TIME", "override apple.transfer.accepted_at (same forms)")
}

/// What `--format` writes.
private enum ReportFormat: String, CaseIterable, Sendable {
    case table, csv, json, html
}

/// Builds the report in `format` and writes it; CSV is written page by page.
private func writeReport(_ builder: ReportBuilder, format: ReportFormat, listLimit: Int, to output: ReportOutput) async throws {
    if format == .csv {
        try await output.write(MigrationReport.csvHeader + "\r\n")
        try await builder.forEachUnresolvedPage(limit: listLimit) { users in
            try await output.write(users.map { MigrationReport.csvLine($0) + "\r\n" }.joined())
        }
        try await output.write(MigrationReport.duplicatesCSV(try await builder.duplicates()))
        return
    }
    let report = try await builder.build()
    switch format {
    case .json: try await output.write(report.renderJSON())
    case .html: try await output.write(report.renderHTML(listLimit: listLimit))
    default: try await output.write(report.renderTable(listLimit: listLimit))
    }
}

/// Parses `2026-12-31T00:00:00Z` (ISO 8601, fractions allowed) or UNIX seconds.
func parseTime(_ text: String, option: String) throws -> Date {
    if let seconds = Double(text), seconds.isFinite { return Date(timeIntervalSince1970: seconds) }
    let formatter = ISO8601DateFormatter()
    if let date = formatter.date(from: text) { return date }
    formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
    if let date = formatter.date(from: text) { return date }
    throw CommandFailure.usage("--\(option) must be ISO 8601 (2026-12-31T00:00:00Z) or UNIX seconds")
}

/// Standard output or a file, written on a dispatch queue so file I/O stays off Swift's cooperative threads.
private final class ReportOutput: @unchecked Sendable {
    // `@unchecked Sendable`: `handle` is set once in init and only used on `queue` afterwards.
    private let handle: FileHandle
    private let ownsHandle: Bool
    private let queue = DispatchQueue(label: "baton.report.output")

    /// Opens `path` for writing (truncating it; mode 0600 when `private`), or standard output when nil.
    init(path: String?, private isPrivate: Bool) throws {
        guard let path else {
            handle = FileHandle.standardOutput
            ownsHandle = false
            return
        }
        let descriptor = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, isPrivate ? 0o600 : 0o644)
        guard descriptor >= 0 else { throw CommandFailure.failed("baton report: cannot write \(path)") }
        if isPrivate { fchmod(descriptor, 0o600) }
        handle = FileHandle(fileDescriptor: descriptor, closeOnDealloc: true)
        ownsHandle = true
    }

    func write(_ text: String) async throws {
        let handle = self.handle
        try await offPool(on: queue) { try handle.write(contentsOf: Data(text.utf8)) }
    }

    func close() async throws {
        guard ownsHandle else { return }
        let handle = self.handle
        try await offPool(on: queue) { try handle.close() }
    }
}
