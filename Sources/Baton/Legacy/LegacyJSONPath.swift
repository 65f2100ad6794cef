import BatonPostgres

/// A location inside a JSON document, as the configuration names it (`legacy.subject_path`, `legacy.subject_copies[].path`):
/// a list whose strings are object keys and whose one-member objects pick the elements of an array by a sibling member,
/// as Kratos' `["providers", {"provider": "apple"}, "subject"]`. Keys are written into statements as SQL literals (a
/// path is configuration, validated: never a value from a request).
public struct LegacyJSONPath: Sendable, Equatable, Codable, ExpressibleByArrayLiteral, CustomStringConvertible {
    /// One step of the path.
    public enum Step: Sendable, Equatable {
        /// The member `key` of an object.
        case key(String)
        /// Each element of an array whose member `member` holds the string `value`.
        case element(member: String, value: String)
    }

    /// The steps, outermost first.
    public var steps: [Step]

    /// The path of `keys`.
    public init(arrayLiteral keys: String...) { steps = keys.map(Step.key) }

    /// A path of `steps`.
    public init(_ steps: [Step]) { self.steps = steps }

    private static let shapes = #"must be a list of keys and one-member objects picking array elements, such as ["providers", {"provider": "apple"}, "subject"]"#

    /// Decodes a list of strings and one-member objects of a string.
    public init(from decoder: any Decoder) throws {
        var list = try decoder.unkeyedContainer()
        var steps: [Step] = []
        while !list.isAtEnd {
            if let key = try? list.decode(String.self) {
                steps.append(.key(key))
            } else if let object = try? list.decode([String: String].self), object.count == 1, let (member, value) = object.first {
                steps.append(.element(member: member, value: value))
            } else {
                throw DecodingError.dataCorrupted(.init(codingPath: decoder.codingPath, debugDescription: Self.shapes))
            }
        }
        self.steps = steps
    }

    /// Encodes the form ``init(from:)`` reads.
    public func encode(to encoder: any Encoder) throws {
        var list = encoder.unkeyedContainer()
        for step in steps {
            switch step {
            case .key(let key): try list.encode(key)
            case .element(let member, let value): try list.encode([member: value])
            }
        }
    }

    /// The path for messages: `providers[provider=apple].subject`.
    public var description: String {
        steps.enumerated().map { index, step in
            switch step {
            case .key(let key): index == 0 ? key : "." + key
            case .element(let member, let value): "[\(member)=\(value)]"
            }
        }.joined()
    }

    /// Whether every step is an object key (a path `#>>` reads, which an expression index can hold).
    public var isKeysOnly: Bool {
        steps.allSatisfy { if case .key = $0 { true } else { false } }
    }

    /// The path, checked under `key`: one to six steps, each text without NUL and at most 255 bytes; with
    /// `keysOnly`, no array element.
    func validated(key: String, keysOnly: Bool) throws -> LegacyJSONPath {
        let texts = steps.flatMap { step -> [String] in
            switch step {
            case .key(let key): [key]
            case .element(let member, let value): [member, value]
            }
        }
        // No `$` either: the texts are literals, and joining statements renumbers every `$n` after the first one's bindings.
        guard (1...6).contains(steps.count), texts.allSatisfy({ !$0.unicodeScalars.contains { $0 == "\0" || $0 == "$" } && $0.utf8.count <= 255 }) else {
            throw ConfigurationError(.invalidValue, key: key, reason: "must hold one to six steps, each without NUL or $ and at most 255 bytes")
        }
        if keysOnly && !isKeysOnly {
            throw ConfigurationError(.invalidValue, key: key, reason: "must hold object keys only (an array element cannot be looked up by index)")
        }
        return self
    }

    /// The text at this key-only path of `document` (an SQL expression of type jsonb, of Baton's own text), NULL where
    /// absent: `(document #>> ARRAY['apple', 'userId'])`.
    func valueSQL(document: String) -> String {
        let keys = steps.compactMap { step -> String? in if case .key(let key) = step { key.sqlLiteral } else { nil } }
        return "(\(document) #>> ARRAY[\(keys.joined(separator: ", "))]::text[])"
    }

    /// `document` (jsonb) with the string at this path replaced by `newValue` (a text expression) wherever `holds`
    /// (given the SQL of the string found there) is true: every other member and element kept, an array's order kept,
    /// nothing added where the path leads nowhere. The document appears once in the result, so it may carry bindings.
    func updatedSQL(document: PostgresQuery, holds: (String) -> PostgresQuery, newValue: PostgresQuery) -> PostgresQuery {
        Self.updated(document, steps[...], depth: 0, holds: holds, newValue: newValue)
    }

    private static func updated(_ document: PostgresQuery, _ steps: ArraySlice<Step>, depth: Int,
                                holds: (String) -> PostgresQuery, newValue: PostgresQuery) -> PostgresQuery {
        let d = "d\(depth).v"
        let body: PostgresQuery
        switch steps.first {
        case nil:
            body = "CASE WHEN jsonb_typeof(\(unsafeRaw: d)) = 'string' AND (" + holds("(\(d) #>> '{}')") + ") THEN to_jsonb((" + newValue
                + ")::text) ELSE \(unsafeRaw: d) END"
        case .key(let key)?:
            let child = updated("(\(unsafeRaw: d) -> \(unsafeRaw: key.sqlLiteral))", steps.dropFirst(), depth: depth + 1, holds: holds, newValue: newValue)
            body = "CASE WHEN jsonb_typeof(\(unsafeRaw: d) -> \(unsafeRaw: key.sqlLiteral)) IS NOT NULL THEN jsonb_set(\(unsafeRaw: d), ARRAY[\(unsafeRaw: key.sqlLiteral)]::text[], "
                + child + ") ELSE \(unsafeRaw: d) END"
        case .element(let member, let value)?:
            let element = "e\(depth)"
            let child = updated("\(unsafeRaw: element).v", steps.dropFirst(), depth: depth + 1, holds: holds, newValue: newValue)
            // jsonb_agg over no element is NULL: an empty array stays as it is.
            body = "CASE WHEN jsonb_typeof(\(unsafeRaw: d)) = 'array' THEN COALESCE((SELECT jsonb_agg(CASE WHEN \(unsafeRaw: element).v ->> \(unsafeRaw: member.sqlLiteral) = \(unsafeRaw: value.sqlLiteral) THEN "
                + child + " ELSE \(unsafeRaw: element).v END ORDER BY \(unsafeRaw: element).o) FROM jsonb_array_elements(\(unsafeRaw: d)) WITH ORDINALITY AS \(unsafeRaw: element)(v, o)), \(unsafeRaw: d)) ELSE \(unsafeRaw: d) END"
        }
        return "(SELECT " + body + " FROM (SELECT (" + document + ")::jsonb AS v) AS d\(unsafeRaw: String(depth)))"
    }
}

extension String {
    /// The text as an SQL string literal, whatever `standard_conforming_strings` is (PostgreSQL's `quote_literal`).
    var sqlLiteral: String {
        let escaped = reduce(into: "") { text, character in
            text += character == "'" ? "''" : character == "\\" ? "\\\\" : String(character)
        }
        return (contains("\\") ? "E'" : "'") + escaped + "'"
    }
}
