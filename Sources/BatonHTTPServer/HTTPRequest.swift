import Foundation

/// An HTTP request as a handler sees it: method, path, decoded query, headers and the whole body.
public struct HTTPRequest: Sendable {
    /// The method, upper case as sent (`GET`, `POST`, …).
    public var method: String
    /// The path without the query string, percent-decoded by the server (e.g. `/auth/token`).
    public var path: String
    /// Query parameters, percent-decoded; for a repeated name the first value wins; a name
    /// without `=` maps to the empty string.
    public var query: [String: String]
    /// Request headers; lookups ignore case.
    public var headers: HTTPHeaders
    /// The body bytes (at most the server's body limit).
    public var body: [UInt8]
    /// The peer's numeric address (`127.0.0.1`, `::1`), when known.
    public var remoteAddress: String?

    /// Creates a request (the server does this; tests may too, to call a ``Router`` in-process).
    public init(method: String, path: String, query: [String: String] = [:], headers: HTTPHeaders = [:], body: [UInt8] = [], remoteAddress: String? = nil) {
        self.method = method
        self.path = path
        self.query = query
        self.headers = headers
        self.body = body
        self.remoteAddress = remoteAddress
    }

    /// The media type of the body without parameters, lower-cased (`application/json`); nil when absent.
    public var mediaType: String? {
        guard let value = headers["Content-Type"] else { return nil }
        let type = value.split(separator: ";", maxSplits: 1, omittingEmptySubsequences: false).first ?? ""
        // Trims what `CharacterSet.whitespaces` holds (tab and the space separators), without Foundation's
        // per-call character-set machinery: every request with a body asks this.
        func isBlank(_ scalar: Unicode.Scalar) -> Bool { scalar == "\t" || scalar.properties.generalCategory == .spaceSeparator }
        var scalars = type.unicodeScalars
        while let first = scalars.first, isBlank(first) { scalars = scalars.dropFirst() }
        while let last = scalars.last, isBlank(last) { scalars = scalars.dropLast() }
        return Substring(scalars).lowercased()
    }

    /// The body parsed as `application/x-www-form-urlencoded`.
    ///
    /// `+` means a space and `%XX` a byte; the decoded bytes must be UTF-8. The Content-Type is
    /// not checked (see ``mediaType``).
    /// - Throws: ``HTTPError`` 400 `invalid_form` for malformed percent-encoding, invalid UTF-8,
    ///   an empty name, or a name given twice (ambiguous parameters are refused, not guessed).
    public func formValues() throws(HTTPError) -> [String: String] {
        var values: [String: String] = [:]
        guard !body.isEmpty else { return values }
        for pair in body.split(separator: UInt8(ascii: "&"), omittingEmptySubsequences: true) {
            let parts = pair.split(separator: UInt8(ascii: "="), maxSplits: 1, omittingEmptySubsequences: false)
            guard let name = FormDecoding.decode(parts[0]), !name.isEmpty else {
                throw HTTPError.invalidForm("malformed form parameter name")
            }
            guard let value = parts.count > 1 ? FormDecoding.decode(parts[1]) : "" else {
                throw HTTPError.invalidForm("malformed value for form parameter \(name)")
            }
            guard values.updateValue(value, forKey: name) == nil else {
                throw HTTPError.invalidForm("form parameter \(name) given more than once")
            }
        }
        return values
    }
}

/// Percent-decoding for `application/x-www-form-urlencoded`.
enum FormDecoding {
    /// Decodes `+` and `%XX`; nil when a `%` is not followed by two hex digits or the result is not UTF-8.
    static func decode(_ bytes: ArraySlice<UInt8>) -> String? {
        var out: [UInt8] = []
        out.reserveCapacity(bytes.count)
        var index = bytes.startIndex
        while index < bytes.endIndex {
            let byte = bytes[index]
            if byte == UInt8(ascii: "+") {
                out.append(UInt8(ascii: " "))
            } else if byte == UInt8(ascii: "%") {
                guard index + 2 < bytes.endIndex,
                      let high = hexValue(bytes[index + 1]), let low = hexValue(bytes[index + 2]) else { return nil }
                out.append(high << 4 | low)
                index += 2
            } else {
                out.append(byte)
            }
            index += 1
        }
        return String(validating: out, as: UTF8.self)
    }

    private static func hexValue(_ byte: UInt8) -> UInt8? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): byte - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): byte - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): byte - UInt8(ascii: "A") + 10
        default: nil
        }
    }
}
