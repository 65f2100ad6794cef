import BatonPostgres
import Foundation

/// A section of the configuration (the file itself, `database`, `apple.transfer.sender`, …) whose decoding,
/// encoding, defaults, checks and documented keys all come from its ``fields``.
protocol ConfigurationSection: Codable, Sendable {
    /// The section's members in file order: each key's one declaration.
    static var fields: [ConfigurationField<Self>] { get }
    /// The section as its initializer's defaults make it, required members left empty. Decoding starts from it,
    /// so an absent member keeps its default, and the documentation states defaults from it.
    static var defaults: Self { get }
}

extension ConfigurationSection {
    /// Decodes the section member by member from ``defaults``.
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: MemberName.self)
        var section = Self.defaults
        for field in Self.fields { try field.decode(container, &section) }
        self = section
    }

    /// Encodes the section member by member; absent optional members are left out.
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: MemberName.self)
        for field in Self.fields { try field.encode(self, &container) }
    }

    /// Every key of the section, its paths under `prefix`.
    static func declaredKeys(under prefix: String) -> [BatonConfiguration.Key] {
        fields.flatMap(\.keys).map { $0.moved(under: prefix) }
    }

    /// Checks each member's own rule; `path` is the section's path (empty for the file).
    func checkFields(at path: String) throws {
        for field in Self.fields { try field.check(self, path.isEmpty ? field.name : "\(path).\(field.name)") }
    }
}

/// A member's JSON name as a coding key.
struct MemberName: CodingKey {
    let stringValue: String
    init(_ name: String) { stringValue = name }
    init?(stringValue: String) { self.stringValue = stringValue }
    var intValue: Int? { nil }
    init?(intValue: Int) { nil }
}

/// A value a key may hold; its type says how the key's environment variable is read and how the key is decoded.
protocol ConfigurationValue: Codable, Sendable {
    static var kind: BatonConfiguration.KeyKind { get }
    /// The names the key accepts, for an ``EnumeratedValue``; nil for any other value.
    static var allowedValues: [String]? { get }
    /// Decodes member `key`, which must be present.
    static func decode(_ container: KeyedDecodingContainer<MemberName>, _ key: MemberName) throws -> Self
    /// Decodes member `key`; nil when absent or `null`.
    static func decodeIfPresent(_ container: KeyedDecodingContainer<MemberName>, _ key: MemberName) throws -> Self?
}

extension ConfigurationValue {
    static var allowedValues: [String]? { nil }

    static func decode(_ container: KeyedDecodingContainer<MemberName>, _ key: MemberName) throws -> Self {
        try container.decode(Self.self, forKey: key)
    }

    static func decodeIfPresent(_ container: KeyedDecodingContainer<MemberName>, _ key: MemberName) throws -> Self? {
        try container.decodeIfPresent(Self.self, forKey: key)
    }
}

/// A value that is one of a few names (`database.pooler`, `legacy.email_policy`, `legacy.on_duplicate`): anything
/// else is refused with an error naming the key and listing the names, never with Swift's decoder text (which
/// quotes the value).
protocol EnumeratedValue: ConfigurationValue, CaseIterable, RawRepresentable<String> {}

extension EnumeratedValue {
    static var kind: BatonConfiguration.KeyKind { .string }

    static var allowedValues: [String]? { allCases.map(\.rawValue) }

    static func decode(_ container: KeyedDecodingContainer<MemberName>, _ key: MemberName) throws -> Self {
        try container.decode(Named<Self>.self, forKey: key).value
    }

    static func decodeIfPresent(_ container: KeyedDecodingContainer<MemberName>, _ key: MemberName) throws -> Self? {
        try container.decodeIfPresent(Named<Self>.self, forKey: key)?.value
    }
}

/// An ``EnumeratedValue`` read from its name; any other JSON value is `dataCorrupted` with a reason listing the names
/// (`must be none, session or transaction`), which ``ConfigurationError`` reports under the key.
private struct Named<Value: EnumeratedValue>: Decodable {
    let value: Value

    init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        guard let name = try? container.decode(String.self), let value = Value(rawValue: name) else {
            let names = Value.allCases.map(\.rawValue)
            let list = names.count > 1 ? names.dropLast().joined(separator: ", ") + " or " + names.last! : names.joined()
            throw DecodingError.dataCorruptedError(in: container, debugDescription: "must be \(list)")
        }
        self.value = value
    }
}

extension String: ConfigurationValue { static var kind: BatonConfiguration.KeyKind { .string } }
extension Int: ConfigurationValue { static var kind: BatonConfiguration.KeyKind { .integer } }
extension Bool: ConfigurationValue { static var kind: BatonConfiguration.KeyKind { .boolean } }
extension URL: ConfigurationValue { static var kind: BatonConfiguration.KeyKind { .string } }
extension Date: ConfigurationValue { static var kind: BatonConfiguration.KeyKind { .string } }
extension Array: ConfigurationValue where Element == String { static var kind: BatonConfiguration.KeyKind { .list } }
extension Dictionary: ConfigurationValue where Key == String, Value == LegacyCondition {
    static var kind: BatonConfiguration.KeyKind { .filters }
}
extension LegacyJSONPath: ConfigurationValue { static var kind: BatonConfiguration.KeyKind { .jsonPath } }
extension BatonConfiguration.ListenAddress: ConfigurationValue { static var kind: BatonConfiguration.KeyKind { .string } }
extension PostgresPooler: EnumeratedValue {}
extension EmailPolicy: EnumeratedValue {}
extension DuplicatePolicy: EnumeratedValue {}

/// A rule a key's value must follow, checked by ``BatonConfiguration/validate()``.
struct ValueCheck<Value>: Sendable {
    /// The rule as the documentation's line for the key ends, when it is worth stating there (a range).
    let documented: String?
    /// Throws a ``ConfigurationError`` naming `key` when `value` breaks the rule.
    let run: @Sendable (_ value: Value, _ key: String) throws -> Void

    init(documented: String? = nil, _ run: @escaping @Sendable (_ value: Value, _ key: String) throws -> Void) {
        self.documented = documented
        self.run = run
    }
}

/// One member of a section: its JSON name, the property it fills, what its absence means, its rule and its
/// documentation. Built with ``required(_:_:kind:check:_:)`` and its siblings, one line of a section's `fields`.
struct ConfigurationField<Section: ConfigurationSection>: Sendable {
    /// The member's name in the JSON object.
    let name: String
    /// The property, so code can name the key of a property (``ConfigurationSection/name(of:)``).
    let property: any PartialKeyPath<Section> & Sendable
    /// Whether the section needs the member (a section is required when one of its members is).
    let isRequired: Bool
    /// The keys it declares, relative to the section: the member itself, or a nested section's keys.
    let keys: [BatonConfiguration.Key]
    let decode: @Sendable (KeyedDecodingContainer<MemberName>, inout Section) throws -> Void
    let encode: @Sendable (Section, inout KeyedEncodingContainer<MemberName>) throws -> Void
    /// Checks the member's rule; the second argument is its path.
    let check: @Sendable (Section, String) throws -> Void

    /// A key that must be present when its section is.
    static func required<Value: ConfigurationValue>(
        _ name: String, _ property: any WritableKeyPath<Section, Value> & Sendable, kind: BatonConfiguration.KeyKind = Value.kind,
        check: ValueCheck<Value>? = nil, _ summary: String
    ) -> Self {
        present(name, property, isRequired: true,
                keys: [.init(name, kind, .required, summary, check?.documented, allowedValues: Value.allowedValues)],
                read: { container, key, _ in try Value.decode(container, key) }, check: { try check?.run($0, $1) })
    }

    /// A key that keeps its value in ``ConfigurationSection/defaults`` when absent or `null`.
    static func defaulted<Value: ConfigurationValue>(
        _ name: String, _ property: any WritableKeyPath<Section, Value> & Sendable, check: ValueCheck<Value>? = nil, _ summary: String
    ) -> Self {
        derived(name, property, documented: documentedValue(Section.defaults[keyPath: property]), from: { $0[keyPath: property] },
                check: check, summary)
    }

    /// A key computed from members decoded before it when absent or `null` (`apple.keys_url` from `apple.base_url`);
    /// `documented` states how.
    static func derived<Value: ConfigurationValue>(
        _ name: String, _ property: any WritableKeyPath<Section, Value> & Sendable, documented: String,
        from fallback: @escaping @Sendable (Section) -> Value, check: ValueCheck<Value>? = nil, _ summary: String
    ) -> Self {
        present(name, property, isRequired: false,
                keys: [.init(name, Value.kind, .value(documented), summary, check?.documented, allowedValues: Value.allowedValues)],
                read: { container, key, section in try Value.decodeIfPresent(container, key) ?? fallback(section) },
                check: { try check?.run($0, $1) })
    }

    /// A key that may stay absent (nil); `absent` says what that means, for the documentation.
    static func optional<Value: ConfigurationValue>(
        _ name: String, _ property: any WritableKeyPath<Section, Value?> & Sendable, kind: BatonConfiguration.KeyKind = Value.kind,
        absent: String, check: ValueCheck<Value>? = nil, _ summary: String
    ) -> Self {
        mayBeAbsent(name, property, keys: [.init(name, kind, .absent(absent), summary, check?.documented, allowedValues: Value.allowedValues)],
                    read: Value.decodeIfPresent, check: { try check?.run($0, $1) })
    }

    /// A nested section, required when one of its members is, else created from its defaults when absent.
    static func section<Value: ConfigurationSection>(_ name: String, _ property: any WritableKeyPath<Section, Value> & Sendable) -> Self {
        let required = Value.fields.contains(where: \.isRequired)
        return present(name, property, isRequired: required, keys: Value.declaredKeys(under: name),
                       read: { container, key, section in
                           required ? try container.decode(Value.self, forKey: key)
                               : try container.decodeIfPresent(Value.self, forKey: key) ?? section[keyPath: property]
                       },
                       check: { try $0.checkFields(at: $1) })
    }

    /// A nested section that may be absent (`apple.transfer`, `legacy.email`).
    static func optionalSection<Value: ConfigurationSection>(_ name: String, _ property: any WritableKeyPath<Section, Value?> & Sendable) -> Self {
        mayBeAbsent(name, property, keys: Value.declaredKeys(under: name), read: { try $0.decodeIfPresent(Value.self, forKey: $1) },
                    check: { try $0.checkFields(at: $1) })
    }

    /// A key holding a list of objects, each a section whose members are keys `name[].member`.
    static func records<Element: ConfigurationSection>(
        _ name: String, _ property: any WritableKeyPath<Section, [Element]?> & Sendable, absent: String, _ summary: String
    ) -> Self {
        mayBeAbsent(name, property, keys: [.init(name, .records, .absent(absent), summary, nil)] + Element.declaredKeys(under: name + "[]"),
                    read: { try $0.decodeIfPresent([Element].self, forKey: $1) },
                    check: { list, path in
                        for (index, element) in list.enumerated() { try element.checkFields(at: "\(path)[\(index)]") }
                    })
    }

    /// A member always holding a value, which `read` decodes (from the section decoded so far, for a default);
    /// `check` is given the value and its path.
    private static func present<Value: Codable & Sendable>(
        _ name: String, _ property: any WritableKeyPath<Section, Value> & Sendable, isRequired: Bool, keys: [BatonConfiguration.Key],
        read: @escaping @Sendable (KeyedDecodingContainer<MemberName>, MemberName, Section) throws -> Value,
        check: @escaping @Sendable (Value, String) throws -> Void
    ) -> Self {
        ConfigurationField(name: name, property: property, isRequired: isRequired, keys: keys,
                           decode: { container, section in section[keyPath: property] = try read(container, MemberName(name), section) },
                           encode: { section, container in try container.encode(section[keyPath: property], forKey: MemberName(name)) },
                           check: { section, path in try check(section[keyPath: property], path) })
    }

    /// A member that may be absent: nil when absent or `null` (`read` decodes it), left out when encoded, checked only
    /// when present.
    private static func mayBeAbsent<Value: Codable & Sendable>(
        _ name: String, _ property: any WritableKeyPath<Section, Value?> & Sendable, keys: [BatonConfiguration.Key],
        read: @escaping @Sendable (KeyedDecodingContainer<MemberName>, MemberName) throws -> Value?,
        check: @escaping @Sendable (Value, String) throws -> Void
    ) -> Self {
        ConfigurationField(name: name, property: property, isRequired: false, keys: keys,
                           decode: { container, section in section[keyPath: property] = try read(container, MemberName(name)) },
                           encode: { section, container in try container.encodeIfPresent(section[keyPath: property], forKey: MemberName(name)) },
                           check: { section, path in
                               if let value = section[keyPath: property] { try check(value, path) }
                           })
    }

    /// A default as the documentation shows it: `` `8` ``, `` `https://appleid.apple.com` ``, `` `[]` ``.
    private static func documentedValue(_ value: some Encodable) -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.withoutEscapingSlashes, .sortedKeys]
        guard let data = try? encoder.encode(value) else { return "" }
        let text = (try? JSONDecoder().decode(String.self, from: data)) ?? String(decoding: data, as: UTF8.self)
        return "`\(text)`"
    }
}

extension ConfigurationSection {
    /// The JSON name of the member stored in `property`: `\Legacy.keyColumn` → `key_column`.
    static func name(of property: PartialKeyPath<Self>) -> String {
        guard let field = fields.first(where: { $0.property == property }) else {
            preconditionFailure("\(property) is not a configuration member")
        }
        return field.name
    }

    /// The path of the key stored in `property` when the section is at `path`: `legacy`, `\.keyColumn` →
    /// `legacy.key_column`.
    static func key(_ property: PartialKeyPath<Self>, in path: String) -> String {
        path.isEmpty ? name(of: property) : "\(path).\(name(of: property))"
    }

    /// The SQL identifier in `property`, validated under its key (``BatonConfiguration/identifier(_:key:allowSchema:)``).
    func identifier(_ property: KeyPath<Self, String>, in path: String, allowSchema: Bool = false) throws -> PostgresIdentifier {
        try BatonConfiguration.identifier(self[keyPath: property], key: Self.key(property, in: path), allowSchema: allowSchema)
    }

    /// The SQL identifier in an optional `property`, if set, validated under its key; never schema-qualified.
    func identifier(_ property: KeyPath<Self, String?>, in path: String) throws -> PostgresIdentifier? {
        guard let text = self[keyPath: property] else { return nil }
        return try BatonConfiguration.identifier(text, key: Self.key(property, in: path), allowSchema: false)
    }
}
