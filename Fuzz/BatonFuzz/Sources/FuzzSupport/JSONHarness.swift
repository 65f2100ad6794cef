import Foundation
import BatonJOSE
import BatonJSON

/// The JSON fuzz target: ``JSON/parse(_:maxDepth:)`` and the parsers built on it, with three oracles
/// besides "no crash, no hang":
/// - round trip: whatever the reader accepts, the writer writes, and the reader accepts that output again
///   as an equal value that writes to the same bytes;
/// - strictness: whatever the reader accepts, Foundation's `JSONSerialization` accepts too (the reader
///   refuses more, never less);
/// - the JWS and JWK Set parsers never crash on the same bytes.
public enum JSONHarness {
    /// Runs one input; returns normally unless an oracle fails, which ends the process.
    public static func run(_ input: UnsafeRawBufferPointer) {
        let bytes = Array(input)
        if let value = try? JSON.parse(bytes, maxDepth: 64) {
            let written = JSON.serializeBytes(value)
            guard let again = try? JSON.parse(written, maxDepth: 64) else { fail("its own output does not parse", bytes) }
            guard again == value else { fail("its output parses to another value", bytes) }
            guard JSON.serializeBytes(again) == written else { fail("writing is not stable", bytes) }
            guard (try? JSONSerialization.jsonObject(with: Data(bytes), options: .fragmentsAllowed)) != nil else {
                fail("accepted a text Foundation refuses", bytes)
            }
        }
        _ = try? JSON.parse(bytes)
        _ = try? CompactJWS.parse(String(decoding: bytes, as: UTF8.self)).claims()
        _ = try? JWKSet(json: bytes)
    }

    /// The seed corpus: JSON texts Baton reads (headers, claims, key sets) and texts it must refuse.
    public static let seeds: [Seed] = [
        ("header", #"{"alg":"RS256","kid":"W6WcOKB"}"#),
        ("claims", #"{"iss":"https://appleid.apple.com","aud":"com.example.app","exp":1795954200,"iat":1795953600,"sub":"001234.0123456789abcdef0123456789abcdef.1234","email_verified":"true","is_private_email":true,"real_user_status":2}"#),
        ("jwks", #"{"keys":[{"kty":"RSA","kid":"fh6Bs8C","use":"sig","alg":"RS256","n":"AQAB","e":"AQAB"},{"kty":"EC","crv":"P-256","x":"AA","y":"AA"},{"kty":"oct","k":"AA"}]}"#),
        ("numbers", "[0,-0,1.5e3,-2E-7,123456789012345678901234567890,1e308,0.1,9007199254740993]"),
        ("escapes", #"["\u00e9\ud83d\ude00\"\\\/\b\f\n\r\t","\u0000",""]"#),
        ("nested", "[[[[[[[[[[[[[[[[{\"a\":{\"b\":[null,true,false]}}]]]]]]]]]]]]]]]]"),
        ("wide-object", "{" + (0..<40).map { "\"k\($0)\":\($0)" }.joined(separator: ",") + "}"),
        ("duplicate", #"{"a":1,"b":2,"a":3}"#),
        ("escaped-duplicate", #"{"sub":"x","s\u0075b":"y"}"#),
        ("lone-surrogate", #"["\ud800"]"#),
        ("leading-zero", "[01]"),
        ("trailing-comma", "[1,]"),
        ("bom", "\u{FEFF}{}"),
        ("nan", "[NaN]"),
        ("comment", "{/* c */}"),
        ("control-character", "[\"a\u{01}b\"]"),
        ("too-deep", String(repeating: "[", count: 100) + String(repeating: "]", count: 100)),
        ("huge-exponent", "[1e400]"),
        ("scalars", " true "),
    ].map { ($0.0, Array($0.1.utf8)) }

    private static func fail(_ what: String, _ input: [UInt8]) -> Never {
        FileHandle.standardError.write(Data("fuzz-json: \(what): \(input.prefix(200).map { String(format: "%02x", $0) }.joined())\n".utf8))
        abort()
    }
}
