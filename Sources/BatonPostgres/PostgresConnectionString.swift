internal import CBatonLibPQ
import Foundation

/// A libpq connection string, checked by libpq itself (`PQconninfoParse`): every form libpq accepts is
/// accepted, namely a URI (`postgresql://u@h1:5432,h2:5433/app?target_session_attrs=read-write`), key/value
/// settings (`host=h1,h2 port=5432,5433 dbname=app target_session_attrs=read-write`) and a service
/// (`service=baton`, read from `pg_service.conf`).
///
/// Its `description` is ``redacted``: it never prints a secret (`password`, `sslpassword`: every keyword libpq
/// marks as one).
public struct PostgresConnectionString: Sendable, Equatable, CustomStringConvertible, CustomDebugStringConvertible {
    /// The string as given; it may hold a password, so never print it.
    public let rawValue: String
    /// The settings the string gives, keyword → value, in libpq's keyword order; secrets included.
    let settings: [(keyword: String, value: String)]
    /// The keywords libpq marks as secret (`dispchar` `*` in `PQconninfoOption`: "hide value"), given or not.
    private let secretKeywords: Set<String>

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
        var secretKeywords = Set<String>()
        var option = options
        while let keyword = option.pointee.keyword {
            let name = String(cString: keyword)
            if let value = option.pointee.val { settings.append((name, String(cString: value))) }
            if let display = option.pointee.dispchar, display.pointee == CChar(UInt8(ascii: "*")) { secretKeywords.insert(name) }
            option += 1
        }
        rawValue = text
        self.settings = settings
        self.secretKeywords = secretKeywords
    }

    /// The settings as libpq's key/value form with every secret's value replaced by `<redacted>`, safe for logs:
    /// `host=a,b port=5432,5433 dbname=app user=baton password=<redacted> target_session_attrs=read-write`.
    public var redacted: String {
        settings.map { setting in
            isSecret(setting.keyword) ? "\(setting.keyword)=<redacted>" : "\(setting.keyword)=\(PostgresConnectionString.quoted(setting.value))"
        }.joined(separator: " ")
    }

    /// The settings that are not secret, in libpq's key/value form: what another program's command line may carry
    /// (it shows in `ps`); ``secrets`` then reach it another way (a service file, the environment).
    public var withoutSecrets: String {
        settings.filter { !isSecret($0.keyword) }.map { "\($0.keyword)=\(PostgresConnectionString.quoted($0.value))" }.joined(separator: " ")
    }

    /// The secret settings the string gives (`password`, `sslpassword`, …), keyword → value; never print them.
    public var secrets: [(keyword: String, value: String)] {
        settings.filter { isSecret($0.keyword) }
    }

    /// Whether libpq marks `keyword` as a secret (`password`, `sslpassword`, …).
    public func isSecret(_ keyword: String) -> Bool {
        secretKeywords.contains(keyword)
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
