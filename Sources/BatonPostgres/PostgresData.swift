import Foundation

/// A Swift value that can be sent as a query parameter.
///
/// Values are sent in PostgreSQL's text format (bytea in binary) with an explicit type OID where the
/// Swift type implies one, so the server never has to guess.
public protocol PostgresEncodable: Sendable {
    /// The parameter's type OID, or 0 to let the server infer it from context.
    static var postgresType: UInt32 { get }
    /// Whether the value is sent in binary format (only bytea).
    static var isBinary: Bool { get }
    /// The encoded value, or nil for NULL.
    func postgresValue() -> [UInt8]?
}

/// A Swift value that can be read from a result column in text format.
public protocol PostgresDecodable: Sendable {
    /// Decodes the column's text value; `nil` when the column is NULL.
    /// - Throws: ``PostgresError`` with code `decoding` when the value does not fit.
    static func decode(postgresText bytes: UnsafeBufferPointer<UInt8>?) throws -> Self
}

extension PostgresEncodable {
    public static var isBinary: Bool { false }
}

/// Type OIDs Baton binds; see `pg_type`.
enum PostgresOID {
    static let unknown: UInt32 = 0
    static let bool: UInt32 = 16
    static let bytea: UInt32 = 17
    static let int8: UInt32 = 20
    static let int4: UInt32 = 23
    static let text: UInt32 = 25
    static let float8: UInt32 = 701
    static let timestamptz: UInt32 = 1184
    static let uuid: UInt32 = 2950
    static let jsonb: UInt32 = 3802
}

private func notNull(_ bytes: UnsafeBufferPointer<UInt8>?, _ type: String) throws -> UnsafeBufferPointer<UInt8> {
    guard let bytes else { throw PostgresError(.decoding, reason: "NULL where \(type) was expected") }
    return bytes
}

private func decodingError(_ type: String) -> PostgresError {
    PostgresError(.decoding, reason: "column value is not a valid \(type)")
}

extension String: PostgresEncodable, PostgresDecodable {
    /// Sent untyped so the server infers text, varchar, json or an enum from context.
    public static var postgresType: UInt32 { PostgresOID.unknown }
    public func postgresValue() -> [UInt8]? { Array(utf8) }
    public static func decode(postgresText bytes: UnsafeBufferPointer<UInt8>?) throws -> String {
        String(decoding: try notNull(bytes, "text"), as: UTF8.self)
    }
}

private func parseInteger<T: FixedWidthInteger>(_ bytes: UnsafeBufferPointer<UInt8>?, _ type: String) throws -> T {
    let bytes = try notNull(bytes, type)
    guard let value = T(String(decoding: bytes, as: UTF8.self)) else { throw decodingError(type) }
    return value
}

extension Int: PostgresEncodable, PostgresDecodable {
    public static var postgresType: UInt32 { PostgresOID.int8 }
    public func postgresValue() -> [UInt8]? { Array(String(self).utf8) }
    public static func decode(postgresText bytes: UnsafeBufferPointer<UInt8>?) throws -> Int { try parseInteger(bytes, "integer") }
}

extension Int64: PostgresEncodable, PostgresDecodable {
    public static var postgresType: UInt32 { PostgresOID.int8 }
    public func postgresValue() -> [UInt8]? { Array(String(self).utf8) }
    public static func decode(postgresText bytes: UnsafeBufferPointer<UInt8>?) throws -> Int64 { try parseInteger(bytes, "bigint") }
}

extension Int32: PostgresEncodable, PostgresDecodable {
    public static var postgresType: UInt32 { PostgresOID.int4 }
    public func postgresValue() -> [UInt8]? { Array(String(self).utf8) }
    public static func decode(postgresText bytes: UnsafeBufferPointer<UInt8>?) throws -> Int32 { try parseInteger(bytes, "integer") }
}

extension Double: PostgresEncodable, PostgresDecodable {
    public static var postgresType: UInt32 { PostgresOID.float8 }
    public func postgresValue() -> [UInt8]? {
        if isNaN { return Array("NaN".utf8) }
        if isInfinite { return Array((self < 0 ? "-Infinity" : "Infinity").utf8) }
        return Array("\(self)".utf8)
    }
    public static func decode(postgresText bytes: UnsafeBufferPointer<UInt8>?) throws -> Double {
        let text = String(decoding: try notNull(bytes, "double precision"), as: UTF8.self)
        switch text {
        case "NaN": return .nan
        case "Infinity": return .infinity
        case "-Infinity": return -.infinity
        default:
            guard let value = Double(text) else { throw decodingError("double precision") }
            return value
        }
    }
}

extension Bool: PostgresEncodable, PostgresDecodable {
    public static var postgresType: UInt32 { PostgresOID.bool }
    public func postgresValue() -> [UInt8]? { self ? [116] : [102] }
    public static func decode(postgresText bytes: UnsafeBufferPointer<UInt8>?) throws -> Bool {
        let bytes = try notNull(bytes, "boolean")
        guard bytes.count == 1 else { throw decodingError("boolean") }
        switch bytes[0] {
        case 116: return true  // "t"
        case 102: return false  // "f"
        default: throw decodingError("boolean")
        }
    }
}

extension UUID: PostgresEncodable, PostgresDecodable {
    public static var postgresType: UInt32 { PostgresOID.uuid }
    public func postgresValue() -> [UInt8]? { Array(uuidString.utf8) }
    public static func decode(postgresText bytes: UnsafeBufferPointer<UInt8>?) throws -> UUID {
        guard let uuid = UUID(uuidString: String(decoding: try notNull(bytes, "uuid"), as: UTF8.self)) else {
            throw decodingError("uuid")
        }
        return uuid
    }
}

extension Date: PostgresEncodable, PostgresDecodable {
    public static var postgresType: UInt32 { PostgresOID.timestamptz }
    /// Sent as ISO 8601 in UTC with microseconds, PostgreSQL's own precision.
    public func postgresValue() -> [UInt8]? {
        let micros = (timeIntervalSince1970 * 1_000_000).rounded()
        var seconds = Int64((micros / 1_000_000).rounded(.down))
        var fraction = Int64(micros) - seconds * 1_000_000
        if fraction < 0 { fraction += 1_000_000; seconds -= 1 }
        var time = time_t(seconds)
        var parts = tm()
        gmtime_r(&time, &parts)
        let text = String(
            format: "%04d-%02d-%02d %02d:%02d:%02d.%06lld+00",
            Int(parts.tm_year) + 1900, Int(parts.tm_mon) + 1, Int(parts.tm_mday),
            Int(parts.tm_hour), Int(parts.tm_min), Int(parts.tm_sec), fraction
        )
        return Array(text.utf8)
    }

    /// Parses timestamptz text in ISO style (`2026-11-29 17:14:46.123456+00`, any offset).
    public static func decode(postgresText bytes: UnsafeBufferPointer<UInt8>?) throws -> Date {
        let bytes = try notNull(bytes, "timestamptz")
        guard let date = parseTimestamp(bytes) else { throw decodingError("timestamptz") }
        return date
    }

    private static func parseTimestamp(_ b: UnsafeBufferPointer<UInt8>) -> Date? {
        var index = 0
        func number(_ width: Int) -> Int? {
            guard index + width <= b.count else { return nil }
            var value = 0
            for offset in 0..<width {
                let byte = b[index + offset]
                guard byte >= 48 && byte <= 57 else { return nil }
                value = value * 10 + Int(byte - 48)
            }
            index += width
            return value
        }
        func expect(_ byte: UInt8) -> Bool {
            guard index < b.count, b[index] == byte else { return false }
            index += 1
            return true
        }
        guard let year = number(4), expect(45), let month = number(2), expect(45), let day = number(2),
              expect(32), let hour = number(2), expect(58), let minute = number(2), expect(58), let second = number(2)
        else { return nil }
        var micros = 0
        if index < b.count, b[index] == 46 {
            index += 1
            var digits = 0
            while index < b.count, b[index] >= 48, b[index] <= 57 {
                if digits < 6 { micros = micros * 10 + Int(b[index] - 48) }
                digits += 1
                index += 1
            }
            if digits < 6 { for _ in digits..<6 { micros *= 10 } }
        }
        var offsetSeconds = 0
        if index < b.count {
            let sign = b[index]
            guard sign == 43 || sign == 45 else { return nil }
            index += 1
            guard let offsetHours = number(2) else { return nil }
            var offsetMinutes = 0, offsetSecs = 0
            if expect(58) { guard let m = number(2) else { return nil }; offsetMinutes = m }
            if expect(58) { guard let s = number(2) else { return nil }; offsetSecs = s }
            offsetSeconds = (offsetHours * 3600 + offsetMinutes * 60 + offsetSecs) * (sign == 45 ? -1 : 1)
        }
        guard index == b.count else { return nil }
        var parts = tm()
        parts.tm_year = Int32(year - 1900)
        parts.tm_mon = Int32(month - 1)
        parts.tm_mday = Int32(day)
        parts.tm_hour = Int32(hour)
        parts.tm_min = Int32(minute)
        parts.tm_sec = Int32(second)
        let epoch = Int(timegm(&parts)) - offsetSeconds
        return Date(timeIntervalSince1970: Double(epoch) + Double(micros) / 1_000_000)
    }
}

/// Raw bytes, bound and read as `bytea`.
extension Array: PostgresEncodable, PostgresDecodable where Element == UInt8 {
    public static var postgresType: UInt32 { PostgresOID.bytea }
    public static var isBinary: Bool { true }
    public func postgresValue() -> [UInt8]? { self }
    /// Decodes bytea's hex output format (`\x…`).
    public static func decode(postgresText bytes: UnsafeBufferPointer<UInt8>?) throws -> [UInt8] {
        let bytes = try notNull(bytes, "bytea")
        guard bytes.count >= 2, bytes[0] == 92, bytes[1] == 120, bytes.count % 2 == 0 else { throw decodingError("bytea") }
        func nibble(_ byte: UInt8) throws -> UInt8 {
            switch byte {
            case 48...57: return byte - 48
            case 97...102: return byte - 87
            case 65...70: return byte - 55
            default: throw decodingError("bytea")
            }
        }
        var out = [UInt8]()
        out.reserveCapacity((bytes.count - 2) / 2)
        var index = 2
        while index < bytes.count {
            out.append(try nibble(bytes[index]) << 4 | nibble(bytes[index + 1]))
            index += 2
        }
        return out
    }
}

extension Data: PostgresEncodable, PostgresDecodable {
    public static var postgresType: UInt32 { PostgresOID.bytea }
    public static var isBinary: Bool { true }
    public func postgresValue() -> [UInt8]? { Array(self) }
    public static func decode(postgresText bytes: UnsafeBufferPointer<UInt8>?) throws -> Data {
        Data(try [UInt8].decode(postgresText: bytes))
    }
}

extension Optional: PostgresEncodable where Wrapped: PostgresEncodable {
    public static var postgresType: UInt32 { Wrapped.postgresType }
    public static var isBinary: Bool { Wrapped.isBinary }
    public func postgresValue() -> [UInt8]? { self?.postgresValue() }
}

extension Optional: PostgresDecodable where Wrapped: PostgresDecodable {
    public static func decode(postgresText bytes: UnsafeBufferPointer<UInt8>?) throws -> Wrapped? {
        guard let bytes else { return nil }
        return try Wrapped.decode(postgresText: bytes)
    }
}

/// A JSON value bound as `jsonb` and decoded from `json`/`jsonb` columns through `Codable`.
public struct PostgresJSON<Value: Codable & Sendable>: PostgresEncodable, PostgresDecodable {
    /// The wrapped value.
    public var value: Value

    /// Wraps `value`.
    public init(_ value: Value) { self.value = value }

    public static var postgresType: UInt32 { PostgresOID.jsonb }
    public func postgresValue() -> [UInt8]? {
        let encoder = JSONEncoder()
        encoder.outputFormatting = .sortedKeys
        return (try? encoder.encode(value)).map { Array($0) }
    }
    public static func decode(postgresText bytes: UnsafeBufferPointer<UInt8>?) throws -> PostgresJSON<Value> {
        let bytes = try notNull(bytes, "json")
        do {
            return PostgresJSON(try JSONDecoder().decode(Value.self, from: Data(buffer: bytes)))
        } catch {
            throw decodingError("JSON of the expected shape")
        }
    }
}
