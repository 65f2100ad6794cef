import Foundation

extension BatonConfiguration {
    /// The kind of value a key holds, which decides how its environment variable is read.
    public enum KeyKind: Sendable, Equatable {
        /// Text.
        case string
        /// A whole number.
        case integer
        /// A list: comma-separated in the environment.
        case list
        /// A file path: relative to the JSON file's directory, or to the current directory from the environment.
        case path
        /// Column → value equality filters: `provider=apple,kind=oauth` in the environment.
        case filters
    }

    /// One configuration key: its path in the JSON file and the kind of value it holds.
    public struct Key: Sendable, Equatable {
        /// Dotted path, e.g. `apple.transfer.sender.team_id`.
        public let path: String
        /// How the value is read from the environment.
        public let kind: KeyKind
        /// Whether the key must be present when its section is (`apple.transfer` itself is optional).
        public let required: Bool

        init(path: String, kind: KeyKind, required: Bool = false) {
            self.path = path
            self.kind = kind
            self.required = required
        }
        /// The environment variable that overrides it.
        public var environmentVariable: String { BatonConfiguration.environmentVariable(for: path) }
    }

    /// Every key of the JSON file, in file order. A key added to the configuration must be added here too:
    /// keys not listed are refused as typos, and only listed keys are read from the environment.
    public static let keys: [Key] = [
        Key(path: "listen", kind: .string),
        Key(path: "database.url", kind: .string, required: true),
        Key(path: "database.pool_size", kind: .integer),
        Key(path: "database.statement_timeout_ms", kind: .integer),
        Key(path: "apple.base_url", kind: .string),
        Key(path: "apple.keys_url", kind: .string),
        Key(path: "apple.issuer", kind: .string),
        Key(path: "apple.client_ids", kind: .list, required: true),
        Key(path: "apple.legacy_client_ids", kind: .list),
        Key(path: "apple.transfer.client_id", kind: .string, required: true),
        Key(path: "apple.transfer.accepted_at", kind: .string),
        Key(path: "apple.transfer.sender.team_id", kind: .string, required: true),
        Key(path: "apple.transfer.sender.key_id", kind: .string, required: true),
        Key(path: "apple.transfer.sender.private_key_path", kind: .path, required: true),
        Key(path: "apple.transfer.recipient.team_id", kind: .string, required: true),
        Key(path: "apple.transfer.recipient.key_id", kind: .string, required: true),
        Key(path: "apple.transfer.recipient.private_key_path", kind: .path, required: true),
        Key(path: "legacy.table", kind: .string, required: true),
        Key(path: "legacy.key_column", kind: .string, required: true),
        Key(path: "legacy.subject_column", kind: .string, required: true),
        Key(path: "legacy.email_column", kind: .string),
        Key(path: "legacy.transfer_column", kind: .string),
        Key(path: "legacy.where", kind: .filters),
        Key(path: "legacy.email.table", kind: .string, required: true),
        Key(path: "legacy.email.column", kind: .string, required: true),
        Key(path: "legacy.email.key_column", kind: .string, required: true),
        Key(path: "legacy.email.reference_column", kind: .string, required: true),
        Key(path: "legacy.json.column", kind: .string, required: true),
        Key(path: "legacy.json.subject_keys", kind: .list),
        Key(path: "legacy.json.email_keys", kind: .list),
        Key(path: "legacy.email_policy", kind: .string),
        Key(path: "admin_token_file", kind: .path),
    ]

    /// The environment variable holding the admin token itself (it has no JSON key).
    public static let adminTokenVariable = "BATON_ADMIN_TOKEN"

    /// The default configuration file, `baton.json` in the current directory.
    public static let defaultPath = "baton.json"

    /// `BATON_` + the path upper-cased with `.` as `_`: `database.url` → `BATON_DATABASE_URL`.
    /// An index in a list (`apple.client_ids[1]`) names the list's variable.
    /// `legacy.email.column` would collide with `legacy.email_column`, so it is `BATON_LEGACY_EMAIL_TABLE_COLUMN`.
    public static func environmentVariable(for path: String) -> String {
        let key = path.split(separator: "[", maxSplits: 1).first.map(String.init) ?? path
        if key == "legacy.email.column" { return "BATON_LEGACY_EMAIL_TABLE_COLUMN" }
        return "BATON_" + key.uppercased().replacingOccurrences(of: ".", with: "_")
    }

    /// Loads the configuration file at `path`, then applies `environment` and validates.
    ///
    /// - Parameters:
    ///   - path: the JSON file; nil means `baton.json`, which may then be absent (everything comes from the
    ///     environment). An explicit path must exist.
    ///   - environment: the variables to apply, usually `ProcessInfo.processInfo.environment` passed in by the
    ///     executable; library code never reads the process environment itself.
    /// - Throws: ``ConfigurationError`` naming the key: `fileUnreadable`, `invalidJSON`, `unknownKey`,
    ///   `missing`, `invalidValue`.
    ///
    /// This reads files synchronously; async code should use ``load(path:environment:queue:)``.
    public static func load(path: String?, environment: [String: String]) throws -> BatonConfiguration {
        let filePath = path ?? defaultPath
        let data: Data
        if let contents = FileManager.default.contents(atPath: filePath) {
            data = contents
        } else if path == nil && !FileManager.default.fileExists(atPath: filePath) {
            data = Data("{}".utf8)
        } else {
            throw ConfigurationError(.fileUnreadable, key: "", reason: "cannot read the configuration file \(filePath)")
        }
        let directory = URL(fileURLWithPath: filePath).deletingLastPathComponent().path
        return try load(json: data, baseDirectory: directory, environment: environment)
    }

    /// ``load(path:environment:)`` on `queue`, keeping the file reads off Swift's cooperative threads.
    /// - Throws: ``ConfigurationError`` as ``load(path:environment:)``.
    public static func load(path: String?, environment: [String: String], queue: DispatchQueue) async throws -> BatonConfiguration {
        try await withCheckedThrowingContinuation { continuation in
            queue.async {
                continuation.resume(with: Result { try load(path: path, environment: environment) })
            }
        }
    }

    /// Decodes `json`, resolves its relative paths against `baseDirectory`, applies `environment` and validates.
    /// - Throws: ``ConfigurationError`` as ``load(path:environment:)``.
    public static func load(json: Data, baseDirectory: String, environment: [String: String]) throws -> BatonConfiguration {
        let parsed: Any
        do {
            parsed = try JSONSerialization.jsonObject(with: json, options: [])
        } catch {
            throw ConfigurationError(.invalidJSON, key: "", reason: "the configuration file is not valid JSON")
        }
        guard var tree = parsed as? [String: Any] else {
            throw ConfigurationError(.invalidJSON, key: "", reason: "the configuration file must hold a JSON object")
        }
        try checkKnownKeys(tree, prefix: "")
        for key in keys where key.kind == .path {
            if let relative = try value(at: key.path, in: tree) as? String, !relative.isEmpty, !relative.hasPrefix("/") {
                try set(URL(fileURLWithPath: baseDirectory).appendingPathComponent(relative).standardized.path, at: key.path, in: &tree)
            }
        }
        try applyEnvironment(environment, to: &tree)

        let normalized = try JSONSerialization.data(withJSONObject: tree, options: [])
        var configuration: BatonConfiguration
        do {
            configuration = try makeDecoder().decode(BatonConfiguration.self, from: normalized)
        } catch let error as DecodingError {
            throw ConfigurationError(decoding: error)
        }
        configuration.adminToken = try loadAdminToken(environment: environment, file: configuration.adminTokenFile)
        try configuration.validate()
        return configuration
    }

    /// A decoder for the configuration's JSON: ISO 8601 dates, with or without fractional seconds.
    static func makeDecoder() -> JSONDecoder {
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .custom { decoder in
            let text = try decoder.singleValueContainer().decode(String.self)
            guard let date = parseTimestamp(text) else {
                throw DecodingError.dataCorrupted(.init(codingPath: decoder.codingPath, debugDescription: "expected an ISO 8601 date and time with a zone, such as 2026-11-01T00:00:00Z"))
            }
            return date
        }
        return decoder
    }

    /// Parses `2026-11-01T00:00:00Z` or `2026-11-01T00:00:00.5+02:00`.
    static func parseTimestamp(_ text: String) -> Date? {
        let plain = ISO8601DateFormatter()
        plain.formatOptions = [.withInternetDateTime]
        if let date = plain.date(from: text) { return date }
        let fractional = ISO8601DateFormatter()
        fractional.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        return fractional.date(from: text)
    }

    // MARK: - The JSON tree

    /// Refuses keys the configuration does not know, and the admin token in the file.
    private static func checkKnownKeys(_ object: [String: Any], prefix: String) throws {
        for (name, child) in object {
            let path = prefix.isEmpty ? name : "\(prefix).\(name)"
            if path == "admin_token" {
                throw ConfigurationError(.unknownKey, key: path, reason: "the admin token is never read from the configuration file: put it in the file named by admin_token_file, or in \(adminTokenVariable)")
            }
            if keys.contains(where: { $0.path == path }) { continue }
            guard keys.contains(where: { $0.path.hasPrefix(path + ".") }) else {
                throw ConfigurationError(.unknownKey, key: path, reason: "unknown key (a typo?)")
            }
            if let childObject = child as? [String: Any] {
                try checkKnownKeys(childObject, prefix: path)
            }
        }
    }

    /// Sets every key whose environment variable is present: an empty value removes the key.
    private static func applyEnvironment(_ environment: [String: String], to tree: inout [String: Any]) throws {
        for key in keys {
            guard let text = environment[key.environmentVariable] else { continue }
            let trimmed = text.trimmingCharacters(in: .whitespacesAndNewlines)
            if trimmed.isEmpty {
                try set(nil, at: key.path, in: &tree)
                continue
            }
            switch key.kind {
            case .string, .path:
                try set(trimmed, at: key.path, in: &tree)
            case .integer:
                guard let number = Int(trimmed) else {
                    throw ConfigurationError(.invalidValue, key: key.path, reason: "must be a whole number")
                }
                try set(number, at: key.path, in: &tree)
            case .list:
                let items = trimmed.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
                try set(items, at: key.path, in: &tree)
            case .filters:
                var filters: [String: String] = [:]
                for item in trimmed.split(separator: ",") {
                    let pair = item.split(separator: "=", maxSplits: 1).map { $0.trimmingCharacters(in: .whitespaces) }
                    guard pair.count == 2, !pair[0].isEmpty else {
                        throw ConfigurationError(.invalidValue, key: key.path, reason: "expected column=value pairs separated by commas")
                    }
                    filters[pair[0]] = pair[1]
                }
                try set(filters, at: key.path, in: &tree)
            }
        }
    }

    private static func value(at path: String, in tree: [String: Any]) throws -> Any? {
        var current: Any = tree
        for part in path.split(separator: ".").map(String.init) {
            guard let object = current as? [String: Any] else { return nil }
            guard let next = object[part] else { return nil }
            current = next
        }
        return current
    }

    /// Sets (or with nil removes) the value at `path`, creating intermediate objects.
    private static func set(_ value: Any?, at path: String, in tree: inout [String: Any]) throws {
        let parts = path.split(separator: ".").map(String.init)
        func assign(_ object: inout [String: Any], _ index: Int) throws {
            let name = parts[index]
            if index == parts.count - 1 {
                object[name] = value
                return
            }
            var child: [String: Any]
            switch object[name] {
            case nil, is NSNull:
                guard value != nil else { return }
                child = [:]
            case let existing as [String: Any]:
                child = existing
            default:
                throw ConfigurationError(.invalidValue, key: parts[...index].joined(separator: "."), reason: "must be an object")
            }
            try assign(&child, index + 1)
            object[name] = child
        }
        try assign(&tree, 0)
    }

    /// The admin token from `BATON_ADMIN_TOKEN`, else from `file`, else none.
    private static func loadAdminToken(environment: [String: String], file: String?) throws -> AdminToken? {
        let text: String
        let key: String
        if let fromEnvironment = environment[adminTokenVariable]?.trimmingCharacters(in: .whitespacesAndNewlines), !fromEnvironment.isEmpty {
            text = fromEnvironment
            key = "admin_token"
        } else if let file, !file.isEmpty {
            guard let data = FileManager.default.contents(atPath: file) else {
                throw ConfigurationError(.fileUnreadable, key: "admin_token_file", reason: "cannot read the admin token file")
            }
            text = String(decoding: data, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
            key = "admin_token_file"
        } else {
            return nil
        }
        guard let token = AdminToken(text) else {
            throw ConfigurationError(.invalidValue, key: key, reason: "the admin token must be at least \(AdminToken.minimumLength) characters")
        }
        return token
    }
}

extension BatonConfiguration {
    /// Whether `path` (an index such as `[0]` ignored) is one of ``keys``, rather than a section.
    static func isKey(_ path: String) -> Bool {
        let key = path.split(separator: "[", maxSplits: 1).first.map(String.init) ?? path
        return keys.contains { $0.path == key }
    }

    /// `database.url (BATON_DATABASE_URL)`, … : the required keys directly in `section`.
    static func requiredKeys(in section: String) -> String {
        let depth = section.split(separator: ".").count + 1
        return keys.filter { $0.required && $0.path.hasPrefix(section + ".") && $0.path.split(separator: ".").count == depth }
            .map { "\($0.path) (\($0.environmentVariable))" }.joined(separator: ", ")
    }
}

extension ConfigurationError {
    /// Names the key a `DecodingError` points at.
    init(decoding error: DecodingError) {
        func path(_ codingPath: [any CodingKey], _ last: (any CodingKey)? = nil) -> String {
            (codingPath + (last.map { [$0] } ?? [])).map { $0.intValue.map { "[\($0)]" } ?? $0.stringValue }
                .joined(separator: ".").replacingOccurrences(of: ".[", with: "[")
        }
        switch error {
        case .keyNotFound(let key, let context):
            let missing = path(context.codingPath, key)
            if BatonConfiguration.isKey(missing) {
                self.init(.missing, key: missing, reason: "missing")
            } else {
                self.init(.missing, key: missing, reason: "missing section: set \(BatonConfiguration.requiredKeys(in: missing))")
            }
        case .valueNotFound(let type, let context):
            self.init(.missing, key: path(context.codingPath), reason: "missing (expected \(ConfigurationError.describe(type)))")
        case .typeMismatch(let type, let context):
            self.init(.invalidValue, key: path(context.codingPath), reason: "expected \(ConfigurationError.describe(type))")
        case .dataCorrupted(let context):
            self.init(.invalidValue, key: path(context.codingPath), reason: context.debugDescription)
        @unknown default:
            self.init(.invalidValue, key: "", reason: "the configuration cannot be decoded")
        }
    }

    private static func describe(_ type: Any.Type) -> String {
        switch type {
        case is String.Type, is URL.Type, is Date.Type: "a string"
        case is Int.Type: "a whole number"
        case is [String].Type, is [Any].Type: "a list of strings"
        default: "an object"
        }
    }
}
