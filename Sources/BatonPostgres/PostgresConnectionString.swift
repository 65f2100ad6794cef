internal import CBatonLibPQ
import Foundation

/// A libpq connection string, checked by libpq itself (`PQconninfoParse`): every form libpq accepts is
/// accepted, namely a URI (`postgresql://u@h1:5432,h2:5433/app?target_session_attrs=read-write`), key/value
/// settings (`host=h1,h2 port=5432,5433 dbname=app target_session_attrs=read-write`) and a service
/// (`service=baton`, read from `pg_service.conf`).
///
/// Its `description` is ``redacted``: it never prints the password.
public struct PostgresConnectionString: Sendable, Equatable, CustomStringConvertible, CustomDebugStringConvertible {
    /// The string as given; it may hold a password, so never print it.
    public let rawValue: String
    /// The settings the string gives, keyword → value, in libpq's keyword order; the password included.
    let settings: [(keyword: String, value: String)]

    /// Parses `text` with libpq.
    /// - Throws: ``PostgresError`` `invalidConfiguration` with libpq's reason, quoted fragments (which may
    ///   hold a password) left out.
    public init(_ text: String) throws {
        guard !text.trimmingCharacters(in: .whitespaces).isEmpty else {
            throw PostgresError(.invalidConfiguration, reason: "the connection string is empty")
        }
        var errorMessage: UnsafeMutablePointer<CChar>?
        guard let options = PQconninfoParse(text, &errorMessage) else {
            let reason = errorMessage.map { String(cString: $0) } ?? "libpq could not parse it"
            if let errorMessage { PQfreemem(errorMessage) }
            throw PostgresError(.invalidConfiguration, reason: "not a libpq connection string: \(PostgresConnectionString.withoutQuotedParts(reason))")
        }
        defer { PQconninfoFree(options) }
        var settings: [(keyword: String, value: String)] = []
        var option = options
        while let keyword = option.pointee.keyword {
            if let value = option.pointee.val { settings.append((String(cString: keyword), String(cString: value))) }
            option += 1
        }
        rawValue = text
        self.settings = settings
    }

    /// The settings as libpq's key/value form with the password replaced by `<redacted>`, safe for logs:
    /// `host=a,b port=5432,5433 dbname=app user=baton password=<redacted> target_session_attrs=read-write`.
    public var redacted: String {
        settings.map { setting in
            setting.keyword == "password" ? "password=<redacted>" : "\(setting.keyword)=\(PostgresConnectionString.quoted(setting.value))"
        }.joined(separator: " ")
    }

    /// The value of one setting (`host`, `port`, `target_session_attrs`, …) as given, or nil.
    public func value(of keyword: String) -> String? {
        settings.first { $0.keyword == keyword }?.value
    }

    public var description: String { redacted }
    public var debugDescription: String { redacted }

    public static func == (lhs: PostgresConnectionString, rhs: PostgresConnectionString) -> Bool { lhs.rawValue == rhs.rawValue }

    /// A value in libpq's key/value syntax: quoted when empty or holding a space, quote or backslash.
    private static func quoted(_ value: String) -> String {
        guard value.isEmpty || value.contains(where: { $0 == " " || $0 == "'" || $0 == "\\" }) else { return value }
        return "'" + value.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "'", with: "\\'") + "'"
    }

    /// libpq's message with every `"…"` fragment replaced by `"…"`: the fragments quote the input.
    private static func withoutQuotedParts(_ message: String) -> String {
        var result = ""
        var inQuote = false
        for character in message.trimmingCharacters(in: .whitespacesAndNewlines) {
            if character == "\"" {
                result.append(inQuote ? "…\"" : "\"")
                inQuote.toggle()
            } else if !inQuote {
                result.append(character)
            }
        }
        return result
    }
}
