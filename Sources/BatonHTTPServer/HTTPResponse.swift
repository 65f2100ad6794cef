import BatonJSON
import Foundation

/// An HTTP response: status, headers and body bytes.
public struct HTTPResponse: Sendable, Equatable {
    /// The status code, e.g. 200.
    public var status: Int
    /// Response headers (`Content-Length` and `Date` are added by the server).
    public var headers: HTTPHeaders
    /// The body bytes.
    public var body: [UInt8]

    /// Creates a response; by default an empty 200.
    public init(status: Int = 200, headers: HTTPHeaders = [:], body: [UInt8] = []) {
        self.status = status
        self.headers = headers
        self.body = body
    }

    /// A JSON response whose body is already-serialized JSON text.
    public static func json(serialized: String, status: Int = 200) -> HTTPResponse {
        HTTPResponse(status: status, headers: ["Content-Type": "application/json"], body: Array(serialized.utf8))
    }

    /// A JSON response whose body is already-serialized JSON bytes (UTF-8).
    public static func json(bytes: [UInt8], status: Int = 200) -> HTTPResponse {
        HTTPResponse(status: status, headers: ["Content-Type": "application/json"], body: bytes)
    }

    /// A JSON response writing `value` with Baton's one JSON writer (``JSON/serializeBytes(_:)``: compact,
    /// members in order).
    public static func json(_ value: JSONValue, status: Int = 200) -> HTTPResponse {
        json(bytes: JSON.serializeBytes(value), status: status)
    }

    /// A JSON response encoding `value` with `JSONEncoder` (keys sorted, slashes unescaped).
    ///
    /// - Throws: the encoder's error when `value` cannot be encoded.
    public static func json(encoding value: some Encodable, status: Int = 200) throws -> HTTPResponse {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return json(bytes: Array(try encoder.encode(value)), status: status)
    }

    /// A `text/plain; charset=utf-8` response.
    public static func text(_ text: String, status: Int = 200, contentType: String = "text/plain; charset=utf-8") -> HTTPResponse {
        HTTPResponse(status: status, headers: ["Content-Type": contentType], body: Array(text.utf8))
    }
}
