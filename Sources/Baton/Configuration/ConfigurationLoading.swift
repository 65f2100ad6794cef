import BatonAppleSignIn
import BatonConcurrency
import BatonJSON
import Foundation

extension BatonConfiguration {
    /// The default configuration file, `baton.json` in the current directory.
    public static let defaultPath = "baton.json"

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
        try await offPool(on: queue) { try load(path: path, environment: environment) }
    }

    /// Decodes `json`, resolves its relative paths against `baseDirectory`, applies `environment` and validates.
    /// - Throws: ``ConfigurationError`` as ``load(path:environment:)``.
    public static func load(json: Data, baseDirectory: String, environment: [String: String]) throws -> BatonConfiguration {
        let parsed: JSONValue
        do {
            parsed = try JSON.parse(Array(json))
        } catch {
            throw ConfigurationError(.invalidJSON, key: "", reason: "the configuration file is not valid JSON")
        }
        guard case .object(var tree) = parsed else {
            throw ConfigurationError(.invalidJSON, key: "", reason: "the configuration file must hold a JSON object")
        }
        for key in keys where key.kind == .path {
            if case .string(let relative)? = value(at: key.path, in: tree), !relative.isEmpty, !relative.hasPrefix("/") {
                try set(.string(URL(fileURLWithPath: baseDirectory).appendingPathComponent(relative).standardized.path), at: key.path, in: &tree)
            }
        }
        try applyEnvironment(environment, to: &tree)
        try checkKnownKeys(tree, prefix: "")

        let normalized = Data(JSON.serializeBytes(.object(tree)))
        var configuration: BatonConfiguration
        do {
            configuration = try makeDecoder().decode(BatonConfiguration.self, from: normalized)
        } catch let error as DecodingError {
            throw ConfigurationError(decoding: error)
        }
        configuration.adminToken = try loadToken(environment[adminTokenVariable], file: configuration.adminTokenFile, key: "admin_token")
        configuration.serviceToken = try loadToken(environment[serviceTokenVariable], file: configuration.serviceTokenFile, key: "service_token")
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

    /// The declared key (or section) nearest to the unknown `path` under the same parent, when it is close enough to be
    /// the key meant (an edit distance of at most a third of its length: `email_colum`, `onduplicate`).
    static func closestKey(to path: String) -> String? {
        let parent = path.split(separator: ".").dropLast().joined(separator: ".")
        let prefix = parent.isEmpty ? "" : parent + "."
        let name = String(path.dropFirst(prefix.count))
        let siblings = Set(keys.compactMap { key -> String? in
            guard key.path.hasPrefix(prefix) else { return nil }
            return key.path.dropFirst(prefix.count).split(separator: ".").first.map(String.init)
        })
        let ranked = siblings.map { ($0, editDistance(Array(name.lowercased()), Array($0))) }.sorted { ($0.1, $0.0) < ($1.1, $1.0) }
        guard let best = ranked.first, best.1 <= max(1, best.0.count / 3) else { return nil }
        return prefix + best.0
    }

    /// The Levenshtein distance between `a` and `b`.
    private static func editDistance(_ a: [Character], _ b: [Character]) -> Int {
        var previous = Array(0...b.count)
        for (i, x) in a.enumerated() {
            var current = [i + 1]
            for (j, y) in b.enumerated() {
                current.append(min(previous[j + 1] + 1, current[j] + 1, previous[j] + (x == y ? 0 : 1)))
            }
            previous = current
        }
        return previous[b.count]
    }

    /// Refuses keys the configuration does not know, and the admin token in the file.
    private static func checkKnownKeys(_ object: JSONObject, prefix: String) throws {
        for member in object {
            let path = prefix.isEmpty ? member.key : "\(prefix).\(member.key)"
            if path == "admin_token" || path == "service_token" {
                throw ConfigurationError(.unknownKey, key: path, reason: "a token is never read from the configuration file: put it in the file named by \(path)_file, or in \(environmentVariable(for: path))")
            }
            if let key = keys.first(where: { $0.path == path }) {
                if key.kind == .records, case .array(let items) = member.value {
                    for case .object(let item) in items { try checkKnownKeys(item, prefix: path + "[]") }
                }
                continue
            }
            guard keys.contains(where: { $0.path.hasPrefix(path + ".") }) else {
                let suggestion = closestKey(to: path).map { "; did you mean \($0)?" } ?? " (a typo?)"
                throw ConfigurationError(.unknownKey, key: path, reason: "unknown key\(suggestion)")
            }
            if case .object(let child) = member.value {
                try checkKnownKeys(child, prefix: path)
            }
        }
    }

    /// Sets every key whose environment variable is present: an empty value removes the key.
    private static func applyEnvironment(_ environment: [String: String], to tree: inout JSONObject) throws {
        for key in keys where !key.isRecordMember {
            guard let text = environment[key.environmentVariable] else { continue }
            let trimmed = text.trimmingCharacters(in: .whitespacesAndNewlines)
            if trimmed.isEmpty {
                try set(nil, at: key.path, in: &tree)
                continue
            }
            switch key.kind {
            case .string, .path:
                try set(.string(trimmed), at: key.path, in: &tree)
            case .integer:
                guard let number = Int(trimmed) else {
                    throw ConfigurationError(.invalidValue, key: key.path, reason: "must be a whole number")
                }
                try set(.number(Double(number)), at: key.path, in: &tree)
            case .boolean:
                switch trimmed.lowercased() {
                case "true", "1": try set(.bool(true), at: key.path, in: &tree)
                case "false", "0": try set(.bool(false), at: key.path, in: &tree)
                default: throw ConfigurationError(.invalidValue, key: key.path, reason: "must be true or false")
                }
            case .list:
                let items = trimmed.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
                try set(.array(items.map(JSONValue.string)), at: key.path, in: &tree)
            case .filters where trimmed.hasPrefix("{"):
                guard case .object(let filters)? = try? JSON.parse(Array(trimmed.utf8)) else {
                    throw ConfigurationError(.invalidValue, key: key.path, reason: "expected a JSON object of column conditions")
                }
                try set(.object(filters), at: key.path, in: &tree)
            case .filters:
                var filters = JSONObject()
                for item in trimmed.split(separator: ",") {
                    let pair = item.split(separator: "=", maxSplits: 1).map { $0.trimmingCharacters(in: .whitespaces) }
                    guard pair.count == 2, !pair[0].isEmpty else {
                        throw ConfigurationError(.invalidValue, key: key.path, reason: "expected column=value pairs separated by commas")
                    }
                    filters[pair[0]] = .string(pair[1])
                }
                try set(.object(filters), at: key.path, in: &tree)
            case .jsonPath:
                guard case .array(let steps)? = try? JSON.parse(Array(trimmed.utf8)) else {
                    throw ConfigurationError(.invalidValue, key: key.path, reason: "expected a JSON array of keys and one-member objects")
                }
                try set(.array(steps), at: key.path, in: &tree)
            case .records:
                guard case .array(let items)? = try? JSON.parse(Array(trimmed.utf8)), items.allSatisfy({ $0.objectValue != nil }) else {
                    throw ConfigurationError(.invalidValue, key: key.path, reason: "expected a JSON array of objects")
                }
                try set(.array(items), at: key.path, in: &tree)
            }
        }
    }

    private static func value(at path: String, in tree: JSONObject) -> JSONValue? {
        var current = JSONValue.object(tree)
        for part in path.split(separator: ".") {
            guard let next = current[String(part)] else { return nil }
            current = next
        }
        return current
    }

    /// Sets (or with nil removes) the value at `path`, creating intermediate objects.
    private static func set(_ value: JSONValue?, at path: String, in tree: inout JSONObject) throws {
        let parts = path.split(separator: ".").map(String.init)
        func assign(_ object: inout JSONObject, _ index: Int) throws {
            let name = parts[index]
            if index == parts.count - 1 {
                object[name] = value
                return
            }
            var child: JSONObject
            switch object[name] {
            case nil, .null?:
                guard value != nil else { return }
                child = JSONObject()
            case .object(let existing)?:
                child = existing
            default:
                throw ConfigurationError(.invalidValue, key: parts[...index].joined(separator: "."), reason: "must be an object")
            }
            try assign(&child, index + 1)
            object[name] = .object(child)
        }
        try assign(&tree, 0)
    }

    /// A bearer token from its environment variable's value, else from `file`, else none. `key` is
    /// `admin_token` or `service_token`; the file is refused when its group or others have any permission.
    private static func loadToken(_ fromEnvironment: String?, file: String?, key: String) throws -> AdminToken? {
        let text: String
        let source: String
        if let fromEnvironment = fromEnvironment?.trimmingCharacters(in: .whitespacesAndNewlines), !fromEnvironment.isEmpty {
            text = fromEnvironment
            source = key
        } else if let file, !file.isEmpty {
            source = key + "_file"
            guard let data = FileManager.default.contents(atPath: file) else {
                throw ConfigurationError(.fileUnreadable, key: source, reason: "cannot read the token file")
            }
            guard !SecretFile.isExposed(file) else {
                throw ConfigurationError(.invalidValue, key: source, reason: "the token file is readable by its group or others: chmod 600 it")
            }
            text = String(decoding: data, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        } else {
            return nil
        }
        guard let token = AdminToken(text) else {
            throw ConfigurationError(.invalidValue, key: source, reason: "the token must be at least \(AdminToken.minimumLength) characters")
        }
        return token
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
