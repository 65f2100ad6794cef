internal import CBatonLibPQ

/// Owns a `PGresult` and frees it with `PQclear`.
///
/// `@unchecked Sendable`: a result is never modified after libpq hands it over, and libpq's
/// accessor functions on a finished result are safe to call from any thread.
final class ResultHandle: @unchecked Sendable {
    let pointer: OpaquePointer

    init(_ pointer: OpaquePointer) { self.pointer = pointer }

    deinit { PQclear(pointer) }
}

/// The rows a statement returned, read lazily from libpq's result.
public struct PostgresResult: Sendable, RandomAccessCollection {
    let handle: ResultHandle?
    /// The number of rows.
    public let count: Int
    /// Rows changed by an INSERT, UPDATE or DELETE (`PQcmdTuples`), 0 otherwise.
    public let affectedRows: Int
    private let columnIndexes: [String: Int]

    init(handle: ResultHandle) {
        self.handle = handle
        count = Int(PQntuples(handle.pointer))
        affectedRows = Int(String(cString: PQcmdTuples(handle.pointer))) ?? 0
        var indexes: [String: Int] = [:]
        for column in 0..<Int(PQnfields(handle.pointer)) {
            indexes[String(cString: PQfname(handle.pointer, Int32(column)))] = column
        }
        columnIndexes = indexes
    }

    /// The names of the columns, in order.
    public var columns: [String] {
        columnIndexes.sorted { $0.value < $1.value }.map(\.key)
    }

    public var startIndex: Int { 0 }
    public var endIndex: Int { count }

    public subscript(position: Int) -> PostgresRow {
        PostgresRow(result: self, row: position)
    }

    /// The index of the column named `name`.
    func columnIndex(_ name: String) throws -> Int {
        guard let index = columnIndexes[name] else {
            throw PostgresError(.decoding, reason: "no column named '\(name)' in the result")
        }
        return index
    }
}

/// One row of a ``PostgresResult``.
public struct PostgresRow: Sendable {
    let result: PostgresResult
    let row: Int

    /// Decodes column `column` (0-based) as `type`.
    /// - Throws: ``PostgresError`` with code `decoding`.
    public func decode<T: PostgresDecodable>(_ type: T.Type = T.self, at column: Int) throws -> T {
        guard let handle = result.handle, column >= 0, column < Int(PQnfields(handle.pointer)) else {
            throw PostgresError(.decoding, reason: "column \(column) is out of range")
        }
        let r = Int32(row), c = Int32(column)
        if PQgetisnull(handle.pointer, r, c) == 1 {
            return try T.decode(postgresText: nil)
        }
        let length = Int(PQgetlength(handle.pointer, r, c))
        return try PQgetvalue(handle.pointer, r, c).withMemoryRebound(to: UInt8.self, capacity: length) { pointer in
            try T.decode(postgresText: UnsafeBufferPointer(start: pointer, count: length))
        }
    }

    /// Decodes the column named `column` as `type`.
    /// - Throws: ``PostgresError`` with code `decoding`.
    public func decode<T: PostgresDecodable>(_ type: T.Type = T.self, column: String) throws -> T {
        try decode(type, at: result.columnIndex(column))
    }
}
