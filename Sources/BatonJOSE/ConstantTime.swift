/// Comparison of secrets in time that does not depend on where they differ.
public enum ConstantTime {
    /// Whether `lhs` and `rhs` hold the same bytes. Every byte of `expected` is read whatever the first
    /// difference; the lengths are compared as integers (a longer candidate never matches), so the time
    /// depends only on the lengths. Used for admin and service tokens and for nonces.
    public static func equals(_ candidate: some Collection<UInt8>, _ expected: some Collection<UInt8>) -> Bool {
        let a = Array(candidate), b = Array(expected)
        var difference: UInt8 = 0
        for index in b.indices {
            difference |= b[index] ^ (index < a.count ? a[index] : 0)
        }
        return difference == 0 && a.count == b.count
    }

    /// ``equals(_:_:)`` over the UTF-8 bytes of two strings.
    public static func equals(_ candidate: some StringProtocol, _ expected: some StringProtocol) -> Bool {
        equals(Array(candidate.utf8), Array(expected.utf8))
    }
}
