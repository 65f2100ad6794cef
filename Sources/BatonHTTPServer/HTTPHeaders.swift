/// An ordered list of HTTP header fields whose names compare case-insensitively.
///
/// Lookups ignore ASCII case (`content-type` finds `Content-Type`); the order and spelling
/// given are kept for responses. Repeated names are allowed.
public struct HTTPHeaders: Sendable, Equatable, Sequence, ExpressibleByDictionaryLiteral {
    /// The fields, in order, as given.
    public private(set) var fields: [(name: String, value: String)]

    /// Creates an empty header list.
    public init() { fields = [] }

    /// Creates a header list from name/value pairs, in order.
    public init(_ fields: [(String, String)]) { self.fields = fields.map { (name: $0.0, value: $0.1) } }

    /// Creates a header list from a literal such as `["Cache-Control": "no-store"]`.
    public init(dictionaryLiteral elements: (String, String)...) { self.init(elements) }

    /// The first value of the header `name`, compared without ASCII case; nil when absent.
    public subscript(name: String) -> String? {
        fields.first { HTTPHeaders.sameName($0.name, name) }?.value
    }

    /// Every value of the header `name`, in order.
    public func values(_ name: String) -> [String] {
        fields.filter { HTTPHeaders.sameName($0.name, name) }.map(\.value)
    }

    /// Appends a field, keeping any earlier field with the same name.
    public mutating func add(_ name: String, _ value: String) { fields.append((name: name, value: value)) }

    /// Replaces every field named `name` (any case) by one field with `value`.
    public mutating func set(_ name: String, _ value: String) {
        remove(name)
        fields.append((name: name, value: value))
    }

    /// Removes every field named `name` (any case).
    public mutating func remove(_ name: String) { fields.removeAll { HTTPHeaders.sameName($0.name, name) } }

    /// The number of fields.
    public var count: Int { fields.count }

    /// Iterates over the fields in order.
    public func makeIterator() -> IndexingIterator<[(name: String, value: String)]> { fields.makeIterator() }

    /// Equal when the same fields appear in the same order (names compared without case).
    public static func == (lhs: HTTPHeaders, rhs: HTTPHeaders) -> Bool {
        lhs.fields.count == rhs.fields.count
            && zip(lhs.fields, rhs.fields).allSatisfy { sameName($0.name, $1.name) && $0.value == $1.value }
    }

    /// ASCII case-insensitive comparison of two header names, without allocating.
    static func sameName(_ lhs: String, _ rhs: String) -> Bool {
        var left = lhs.utf8.makeIterator(), right = rhs.utf8.makeIterator()
        while true {
            switch (left.next(), right.next()) {
            case (nil, nil): return true
            case let (l?, r?):
                if l != r && lowerASCII(l) != lowerASCII(r) { return false }
            default: return false
            }
        }
    }

    private static func lowerASCII(_ byte: UInt8) -> UInt8 {
        (byte >= 0x41 && byte <= 0x5A) ? byte | 0x20 : byte
    }
}
