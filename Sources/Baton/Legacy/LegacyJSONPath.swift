import BatonPostgres

/// A location inside a JSON document, from the configuration (`legacy.email_copies[].path`, `legacy.subject_copies[].path`):
/// a list whose strings are object keys and whose one-member objects `{"provider": "apple"}` pick the elements of
/// an array whose member `provider` is that string (Kratos' `["providers", {"provider": "apple"}, "subject"]`).
///
/// Every instance is valid: 1 to 8 steps, the last a key; each key, member and value non-empty, at most 255 bytes,
/// without a NUL or a `$` (Baton's statements hold no `$` but their placeholders). The SQL below spells them as
/// string literals, so that an index expression and the lookup using it are the same text.
public struct LegacyJSONPath: Sendable, Equatable, Codable {
    /// One step of the path.
    public enum Step: Sendable, Equatable {
        /// The member `key` of an object.
        case key(String)
        /// Each element of an array that is an object whose member `member` is the string `value`.
        case element(member: String, equals: String)
    }

    /// The steps, from the document's top.
    public let steps: [Step]

    /// The forms a path may take, as a refusal names them.
    static let shapes = #"must be a list of 1 to 8 steps, each a JSON key or a one-member object {"member": "value"} picking array elements, ending with a key; each text non-empty, at most 255 bytes, without NUL or $"#

    /// A path of `steps`.
    /// - Throws: ``Refusal`` when the steps break a rule above.
    public init(_ steps: [Step]) throws {
        let texts = steps.flatMap { step -> [String] in
            switch step {
            case .key(let key): [key]
            case .element(let member, let value): [member, value]
            }
        }
        guard (1...8).contains(steps.count), case .key? = steps.last,
              texts.allSatisfy({ !$0.isEmpty && $0.utf8.count <= 255 && !$0.unicodeScalars.contains { $0 == "\0" || $0 == "$" } }) else {
            throw Refusal()
        }
        self.steps = steps
    }

    /// A path of object keys only: `["apple", "userId"]`.
    /// - Throws: ``Refusal`` when the keys break a rule above.
    public init(keys: [String]) throws {
        try self.init(keys.map(Step.key))
    }

    /// Thrown for steps that are no path; ``LegacyJSONPath/shapes`` says why.
    public struct Refusal: Error, Sendable {}

    /// Decodes a JSON array of strings and one-member objects of a string; anything else is `dataCorrupted` with the
    /// forms accepted, which ``ConfigurationError`` reports under the key.
    public init(from decoder: any Decoder) throws {
        var list = try decoder.unkeyedContainer()
        var steps: [Step] = []
        while !list.isAtEnd {
            if let key = try? list.decode(String.self) {
                steps.append(.key(key))
            } else if let selector = try? list.decode([String: String].self), selector.count == 1, let (member, value) = selector.first {
                steps.append(.element(member: member, equals: value))
            } else {
                throw DecodingError.dataCorrupted(.init(codingPath: decoder.codingPath, debugDescription: Self.shapes))
            }
        }
        do {
            try self.init(steps)
        } catch {
            throw DecodingError.dataCorrupted(.init(codingPath: decoder.codingPath, debugDescription: Self.shapes))
        }
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

    /// The object keys, when the path has no array step.
    public var keys: [String]? {
        steps.reduce([String]?.some([])) { keys, step in
            guard case .key(let key) = step else { return nil }
            return keys.map { $0 + [key] }
        }
    }

    /// The text at the path in `document` (an SQL expression of type jsonb, of Baton's own text), for a path of
    /// keys only: `(document) #>> ARRAY['apple', 'userId']`, the expression an index on it names too; nil for a
    /// path with an array step.
    public func valueSQL(document: String) -> String? {
        keys.map { "(\(document)) #>> ARRAY[\($0.map(Self.literal).joined(separator: ", "))]" }
    }

    /// The document `document` (an SQL expression of type jsonb, of Baton's own text) with the string at the path
    /// replaced by `newValue` (an SQL expression, written as a JSON string) wherever `holds` (given the SQL text of the
    /// string found there) is true; at an array step, in each element it picks. Everything else stays: other keys,
    /// other elements and their order (jsonb's normal form). A location that is absent, or holds no string, is left
    /// as it is and never added; a NULL document stays NULL; a NULL `newValue` writes nothing.
    public func updatedSQL(document: String, holds: (String) -> PostgresQuery, newValue: PostgresQuery) -> PostgresQuery {
        "(SELECT " + Self.updated("jp0.v", steps[...], depth: 1, holds: holds, newValue: newValue) + " FROM (SELECT (\(unsafeRaw: document))::jsonb AS v) AS jp0)"
    }

    /// `value` (jsonb) with `steps` applied; `depth` numbers the aliases of nested array steps.
    private static func updated(_ value: String, _ steps: ArraySlice<Step>, depth: Int, holds: (String) -> PostgresQuery,
                                newValue: PostgresQuery) -> PostgresQuery {
        switch steps.first! {
        case .key(let key):
            let member = "\(value) -> \(literal(key))"
            if steps.count == 1 {
                return "CASE WHEN jsonb_typeof(\(unsafeRaw: member)) = 'string' AND (" + holds("(\(value) ->> \(literal(key)))")
                    + ") THEN jsonb_set(\(unsafeRaw: value), ARRAY[\(unsafeRaw: literal(key))], COALESCE(to_jsonb((" + newValue
                    + ")::text), \(unsafeRaw: member)), false) ELSE \(unsafeRaw: value) END"
            }
            return "CASE WHEN jsonb_typeof(\(unsafeRaw: member)) IN ('object', 'array') THEN jsonb_set(\(unsafeRaw: value), ARRAY[\(unsafeRaw: literal(key))], "
                + updated("(\(member))", steps.dropFirst(), depth: depth, holds: holds, newValue: newValue) + ", false) ELSE \(unsafeRaw: value) END"
        case .element(let member, let equals):
            // Each element in its place (WITH ORDINALITY); an empty array aggregates to NULL and stays as it was.
            let alias = "jp\(depth)", element = "jp\(depth).e"
            return "CASE WHEN jsonb_typeof(\(unsafeRaw: value)) = 'array' THEN COALESCE((SELECT jsonb_agg(CASE WHEN \(unsafeRaw: element) ->> \(unsafeRaw: literal(member))"
                + " = \(unsafeRaw: literal(equals)) THEN " + updated(element, steps.dropFirst(), depth: depth + 1, holds: holds, newValue: newValue)
                + " ELSE \(unsafeRaw: element) END ORDER BY \(unsafeRaw: alias).n) FROM jsonb_array_elements(\(unsafeRaw: value)) WITH ORDINALITY AS \(unsafeRaw: alias)(e, n)), \(unsafeRaw: value))"
                + " ELSE \(unsafeRaw: value) END"
        }
    }

    /// `text` as an SQL string literal (validated: no NUL, no `$`).
    private static func literal(_ text: String) -> String {
        BatonConfiguration.LegacyIdentifiers.Filter.literal(text)
    }
}
