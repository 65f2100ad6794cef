import BatonAppleSignIn
import BatonJOSE

/// The verifier's seed corpus: valid tokens, tokens signed correctly but carrying claims the policy
/// refuses, and forgeries (refused algorithms, swapped or unknown keys, altered payloads, malformed parts).
///
/// Built deterministically (RS256 signatures are deterministic), so the harness recomputes the exact set of
/// tokens it legitimately signed at every start and the committed corpus never drifts from it.
struct SeedTokens {
    /// Tokens signed with `fuzz-1`: the only tokens that may ever be accepted.
    private(set) var legitimate: [String] = []
    /// Corpus files: a mode byte (0: raw token, 1: header 0xFF payload signed by the harness) then the input.
    private(set) var seeds: [Seed] = []

    init(signingKey: RSAPrivateKey, ecKey: P256PrivateKey) throws {
        let issued = VerifierHarness.issuedAt
        let base: [(String, String)] = [
            ("iss", #""https://appleid.apple.com""#), ("aud", #""com.example.app""#),
            ("exp", String(Int(issued) + 600)), ("iat", String(Int(issued))),
            ("sub", #""001234.0123456789abcdef0123456789abcdef.1234""#),
        ]
        func payload(_ members: [(String, String)], replacing: [(String, String?)] = []) -> String {
            var result = members
            for (name, value) in replacing {
                if let index = result.firstIndex(where: { $0.0 == name }) {
                    if let value { result[index].1 = value } else { result.remove(at: index) }
                } else if let value {
                    result.append((name, value))
                }
            }
            return "{" + result.map { "\"\($0.0)\":\($0.1)" }.joined(separator: ",") + "}"
        }
        let full = payload(base, replacing: [
            ("nonce", #""2c26b46b68ffc68ff99b453c1d30413413422d706483bfa0f98a5e886266e7ae""#), ("c_hash", #""bD4Kx4_wGMF5ZyJwe5PjzQ""#),
            ("email", #""q7xk2mfh9d@privaterelay.appleid.com""#), ("email_verified", "true"), ("is_private_email", #""true""#),
            ("auth_time", String(Int(issued))), ("nonce_supported", "true"), ("real_user_status", "2"),
            ("transfer_sub", #""000999.0f1e2d3c4b5a69788796a5b4c3d2e1f0.0999""#),
        ])
        let header = VerifierHarness.defaultHeader

        func signed(_ header: String, _ payload: String) throws -> String {
            let input = Base64URL.encode(Array(header.utf8)) + "." + Base64URL.encode(Array(payload.utf8))
            return input + "." + Base64URL.encode(try signingKey.signRS256(Array(input.utf8)))
        }
        func token(_ name: String, _ header: String, _ payload: String) throws {
            let text = try signed(header, payload)
            legitimate.append(text)
            seeds.append((name, [0] + Array(text.utf8)))
        }
        func raw(_ name: String, _ text: String) { seeds.append((name, [0] + Array(text.utf8))) }
        func harnessSigned(_ name: String, _ header: String?, _ payload: String) {
            seeds.append((name, [1] + (header.map { Array($0.utf8) + [0xFF] } ?? []) + Array(payload.utf8)))
        }

        // Valid tokens.
        let minimal = payload(base)
        try token("valid-minimal", header, minimal)
        try token("valid-full", header, full)
        try token("valid-aud-array", header, payload(base, replacing: [("aud", #"["com.other","com.example.web"]"#)]))
        try token("valid-typ-jwt", #"{"alg":"RS256","kid":"fuzz-1","typ":"JWT"}"#, minimal)
        // Signed by the right key, refused by the claim checks.
        try token("signed-expired", header, payload(base, replacing: [("exp", String(Int(issued) - 3600))]))
        try token("signed-future-iat", header, payload(base, replacing: [("iat", String(Int(issued) + 3600))]))
        try token("signed-future-nbf", header, payload(base, replacing: [("nbf", String(Int(issued) + 3600))]))
        try token("signed-wrong-iss", header, payload(base, replacing: [("iss", #""https://appleid.apple.com.evil""#)]))
        try token("signed-wrong-aud", header, payload(base, replacing: [("aud", #""com.evil.app""#)]))
        try token("signed-aud-not-strings", header, payload(base, replacing: [("aud", #"[1,"com.example.app"]"#)]))
        try token("signed-no-sub", header, payload(base, replacing: [("sub", nil)]))
        try token("signed-empty-sub", header, payload(base, replacing: [("sub", #""""#)]))
        try token("signed-exp-string", header, payload(base, replacing: [("exp", #""9999999999""#)]))
        try token("signed-duplicate-sub", header, minimal.dropLast() + #","sub":"001234.attacker.0000"}"#)
        try token("signed-escaped-duplicate", header, minimal.dropLast() + #","s\u0075b":"001234.attacker.0000"}"#)
        try token("signed-payload-array", header, "[" + minimal + "]")
        try token("signed-crit", #"{"alg":"RS256","kid":"fuzz-1","crit":["exp"]}"#, minimal)
        try token("signed-typ-jws", #"{"alg":"RS256","kid":"fuzz-1","typ":"JWS"}"#, minimal)
        try token("signed-duplicate-alg", #"{"alg":"none","alg":"RS256","kid":"fuzz-1"}"#, minimal)
        try token("signed-no-kid", #"{"alg":"RS256"}"#, minimal)
        try token("signed-kid-of-other-key", #"{"alg":"RS256","kid":"fuzz-2"}"#, minimal)
        try token("signed-kid-of-ec-key", #"{"alg":"RS256","kid":"fuzz-ec"}"#, minimal)
        try token("signed-deep-payload", header, minimal.dropLast() + #","x":[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]}"#)

        // Forgeries.
        let valid = legitimate[0]
        let parts = valid.split(separator: ".").map(String.init)
        let encodedHeader = Base64URL.encode(Array(header.utf8))
        let forgedPayload = Base64URL.encode(Array(payload(base, replacing: [("sub", #""001234.attacker.0000""#)]).utf8))
        raw("forged-payload-swapped", parts[0] + "." + forgedPayload + "." + parts[2])
        raw("forged-alg-none", Base64URL.encode(Array(#"{"alg":"none","kid":"fuzz-1"}"#.utf8)) + "." + parts[1] + ".")
        raw("forged-alg-none-signature-kept", Base64URL.encode(Array(#"{"alg":"none","kid":"fuzz-1"}"#.utf8)) + "." + parts[1] + "." + parts[2])
        raw("forged-hs256", Base64URL.encode(Array(#"{"alg":"HS256","kid":"fuzz-1"}"#.utf8)) + "." + parts[1] + "."
            + Base64URL.encode(Digest.sha256(Array((parts[0] + "." + parts[1]).utf8))))
        let es256Header = Base64URL.encode(Array(#"{"alg":"ES256","kid":"fuzz-ec"}"#.utf8))
        let es256Input = es256Header + "." + parts[1]
        raw("forged-es256-valid-signature", es256Input + "." + Base64URL.encode(try ecKey.signES256(Array(es256Input.utf8))))
        raw("forged-kid-swapped", Base64URL.encode(Array(#"{"alg":"RS256","kid":"fuzz-2"}"#.utf8)) + "." + parts[1] + "." + parts[2])
        raw("forged-unknown-kid", Base64URL.encode(Array(#"{"alg":"RS256","kid":"apple-1"}"#.utf8)) + "." + parts[1] + "." + parts[2])
        raw("forged-embedded-jwk", Base64URL.encode(Array(#"{"alg":"RS256","kid":"attacker","jwk":{"kty":"RSA","n":"AQAB","e":"AQAB"}}"#.utf8)) + "." + parts[1] + "." + parts[2])
        var truncated = try Base64URL.decode(parts[2]); truncated.removeLast()
        raw("forged-signature-short", parts[0] + "." + parts[1] + "." + Base64URL.encode(truncated))
        raw("forged-signature-long", parts[0] + "." + parts[1] + "." + Base64URL.encode(try Base64URL.decode(parts[2]) + [0]))
        raw("forged-signature-zero", parts[0] + "." + parts[1] + "." + Base64URL.encode([UInt8](repeating: 0, count: 256)))
        raw("forged-signature-padded", valid + "==")
        raw("forged-signature-standard-base64", parts[0] + "." + parts[1] + "." + parts[2].replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/"))
        raw("forged-four-parts", valid + "." + parts[2])
        raw("forged-two-parts", parts[0] + "." + parts[1])
        raw("forged-whitespace", " " + valid)
        raw("forged-header-duplicate-kid", Base64URL.encode(Array(#"{"alg":"RS256","kid":"fuzz-1","kid":"fuzz-2"}"#.utf8)) + "." + parts[1] + "." + parts[2])
        raw("forged-oversize", encodedHeader + "." + String(repeating: "A", count: 17_000) + "." + parts[2])
        raw("forged-empty", "")

        // Inputs the harness signs itself, to reach the claim checks.
        harnessSigned("harness-minimal", nil, minimal)
        harnessSigned("harness-full", nil, full)
        harnessSigned("harness-header-typ", #"{"alg":"RS256","kid":"fuzz-1","typ":"JWT"}"#, minimal)
        harnessSigned("harness-header-alg-none", #"{"alg":"none","kid":"fuzz-1"}"#, minimal)
        harnessSigned("harness-nbf", nil, payload(base, replacing: [("nbf", String(Int(issued)))]))
        harnessSigned("harness-exp-edge", nil, payload(base, replacing: [("exp", String(Int(issued) + 1))]))
        harnessSigned("harness-exp-fraction", nil, payload(base, replacing: [("exp", "1795953659.999")]))
        harnessSigned("harness-aud-array", nil, payload(base, replacing: [("aud", #"["com.example.web"]"#)]))
        harnessSigned("harness-unicode-sub", nil, payload(base, replacing: [("sub", #""\u00e9\u0301x""#)]))
        harnessSigned("harness-nonce", nil, payload(base, replacing: [("nonce", #""abc""#), ("nonce_supported", "false")]))
    }
}
