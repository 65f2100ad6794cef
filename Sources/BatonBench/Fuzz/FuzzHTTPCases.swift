import BatonJOSE
import BatonRawHTTP
import Foundation

/// A small, fast, seedable generator (SplitMix64): the same seed gives the same requests.
struct SeededGenerator: RandomNumberGenerator {
    private var state: UInt64

    init(seed: UInt64) { state = seed }

    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

/// One request of `baton-bench fuzz http`: what to send and what the server owes in return.
struct FuzzCase: Sendable {
    /// The families of requests, each with its weight in the mix.
    enum Kind: String, CaseIterable {
        case wellFormed = "well_formed"
        case randomJSON = "random_json"
        case mutatedJSON = "mutated_json"
        case brokenRequestLine = "broken_request_line"
        case hugeHeaders = "huge_headers"
        case badChunking = "bad_chunking"
        case slowBody = "slow_body"
        case stalledBody = "stalled_body"
        case mutatedRaw = "mutated_raw"
        case pipelined
        case randomBytes = "random_bytes"
        case signInNonce = "signin_nonce"
        case linkRandomNonce = "link_random_nonce"
        case linkSessionNonce = "link_session_nonce"

        /// The route a Baton-only kind needs among the target's paths; nil for kinds every server gets.
        var route: String? {
            switch self {
            case .signInNonce: "/v1/signin"
            case .linkRandomNonce: "/v1/link"
            case .linkSessionNonce: "/v1/link/session"
            default: nil
            }
        }

        var weight: Int {
            switch self {
            case .wellFormed: 12
            case .randomJSON: 16
            case .mutatedJSON: 12
            case .brokenRequestLine: 10
            case .hugeHeaders: 6
            case .badChunking: 10
            case .slowBody: 3
            case .stalledBody: 2
            case .mutatedRaw: 18
            case .pipelined: 5
            case .randomBytes: 6
            case .signInNonce: 8
            case .linkRandomNonce: 4
            case .linkSessionNonce: 4
            }
        }
    }

    /// What the server owes.
    enum Expectation: Sendable {
        /// `count` complete responses, none a server error (5xx): the request was well-formed HTTP.
        case answers(count: Int)
        /// Any response or a closed connection; a 5xx other than 501 or 505 (protocol answers) is a failure.
        case anything
    }

    var kind: Kind
    var pieces: [RawExchange.Piece]
    var expectation: Expectation
    var timeoutMilliseconds: Int
    /// A second request built from the body of the first one's 2xx answer (a link with the nonce of the
    /// session the first request opened); owed one answer like any well-formed request.
    var followUp: (@Sendable ([UInt8]) -> [UInt8])? = nil
}

/// An identity token the target accepts (minted by the Apple emulator it trusts) and the nonce its claim was
/// made from: `nonce` for the native flow (the claim is its SHA-256 in hex), or the claim itself for the web flow.
struct FuzzToken: Sendable {
    var idToken: String
    var nonce: String
}

/// Builds the requests: well-formed ones to the target's paths, random and mutated JSON bodies, and
/// broken HTTP (request lines, headers, chunking, slow and stalled bodies, pipelining, random bytes).
struct FuzzCaseGenerator: Sendable {
    /// Paths requests go to (POST and GET); random paths are added now and then.
    let paths: [String]
    /// The `Host` header value.
    let host: String
    /// Tokens sign-in bodies carry now and then (with their own nonce, another one, or a mutation of it).
    let tokens: [FuzzToken]
    /// The kinds this target gets: the Baton-only ones when their route is among `paths`.
    private let kinds: [FuzzCase.Kind]
    private let totalWeight: Int

    init(paths: [String], host: String, tokens: [FuzzToken] = []) {
        self.paths = paths
        self.host = host
        self.tokens = tokens
        kinds = FuzzCase.Kind.allCases.filter { kind in kind.route.map { route in paths.contains { $0.hasSuffix(route) } } ?? true }
        totalWeight = kinds.reduce(0) { $0 + $1.weight }
    }

    /// The request numbered `index` of a run with `seed`: independent of every other, so any one replays alone.
    func make(index: Int, seed: UInt64) -> FuzzCase {
        var random = SeededGenerator(seed: seed &* 0x2545_F491_4F6C_DD1D &+ UInt64(index))
        var pick = Int.random(in: 0..<totalWeight, using: &random)
        var kind = FuzzCase.Kind.wellFormed
        for candidate in kinds {
            if pick < candidate.weight { kind = candidate; break }
            pick -= candidate.weight
        }
        return make(kind, using: &random)
    }

    private func make(_ kind: FuzzCase.Kind, using random: inout SeededGenerator) -> FuzzCase {
        let path = randomPath(using: &random)
        switch kind {
        case .wellFormed:
            return answered(kind, [wellFormed(path: path, using: &random)])
        case .randomJSON:
            let body = Array(RandomJSON.value(depth: 0, using: &random).utf8)
            return answered(kind, [request("POST", path, contentType: "application/json", body: body)])
        case .mutatedJSON:
            let body = Mutator.mutate(Array(RandomJSON.value(depth: 0, using: &random).utf8), using: &random)
            return answered(kind, [request("POST", path, contentType: "application/json", body: body)])
        case .brokenRequestLine:
            return anything(kind, [BrokenHTTP.requestLine(path: path, host: host, using: &random)])
        case .hugeHeaders:
            return anything(kind, [BrokenHTTP.hugeHeaders(path: path, host: host, using: &random)])
        case .badChunking:
            return anything(kind, [BrokenHTTP.chunked(path: path, host: host, using: &random)])
        case .slowBody:
            let body = Array(RandomJSON.value(depth: 0, using: &random).utf8)
            var pieces = [RawExchange.Piece(bytes: head("POST", path, ["Content-Type: application/json", "Content-Length: \(body.count)"]), pauseMilliseconds: Int.random(in: 1...20, using: &random))]
            var offset = 0
            while offset < body.count {
                let size = Int.random(in: 1...max(1, body.count / 3 + 1), using: &random)
                pieces.append(RawExchange.Piece(bytes: Array(body[offset..<min(body.count, offset + size)]), pauseMilliseconds: Int.random(in: 1...15, using: &random)))
                offset += size
            }
            return FuzzCase(kind: kind, pieces: pieces, expectation: .answers(count: 1), timeoutMilliseconds: 5_000)
        case .stalledBody:
            let announced = Int.random(in: 10...60_000, using: &random)
            let sent = Int.random(in: 0..<10, using: &random)
            let bytes = head("POST", path, ["Content-Type: application/json", "Content-Length: \(announced)"]) + [UInt8](repeating: UInt8(ascii: "{"), count: sent)
            return FuzzCase(kind: kind, pieces: [RawExchange.Piece(bytes: bytes, pauseMilliseconds: Int.random(in: 5...50, using: &random))],
                            expectation: .anything, timeoutMilliseconds: 20)
        case .mutatedRaw:
            return anything(kind, [Mutator.mutate(wellFormed(path: path, using: &random), using: &random)])
        case .pipelined:
            let count = Int.random(in: 2...4, using: &random)
            var bytes: [UInt8] = []
            for _ in 0..<count { bytes += wellFormed(path: randomPath(using: &random), using: &random) }
            return FuzzCase(kind: kind, pieces: [RawExchange.Piece(bytes: bytes)], expectation: .answers(count: count), timeoutMilliseconds: 5_000)
        case .randomBytes:
            let bytes = (0..<Int.random(in: 1...2_048, using: &random)).map { _ in UInt8.random(in: 0...255, using: &random) }
            return anything(kind, [bytes])
        case .signInNonce:
            return answered(kind, [json(routePath(kind), signInBody(using: &random))])
        case .linkRandomNonce:
            let nonce = BatonBodies.nonce(using: &random)
            return answered(kind, [json(routePath(kind), BatonBodies.link(nonce: nonce, tokens: tokens, using: &random))])
        case .linkSessionNonce:
            let linkPath = String(routePath(kind).dropLast("/session".count))
            let bodyRandom = SeededGenerator(seed: random.next())
            let tokens = tokens
            var session = answered(kind, [json(routePath(kind), Bool.random(using: &random) ? "{}" : RandomJSON.appleLike(using: &random))])
            session.followUp = { answer in
                var random = bodyRandom
                let nonce = BatonBodies.member("nonce", of: answer) ?? BatonBodies.nonce(using: &random)
                return json(linkPath, BatonBodies.link(nonce: nonce, tokens: tokens, using: &random))
            }
            return session
        }
    }

    /// The target path of a Baton-only kind's route (with the base path).
    private func routePath(_ kind: FuzzCase.Kind) -> String {
        paths.first { $0.hasSuffix(kind.route ?? "") } ?? "/"
    }

    /// A sign-in body: a token (one the target accepts, or not) with its nonce, a mutation of it, a 64-hex nonce
    /// or none, under the native, web, an unknown or no `nonce_flow`.
    private func signInBody(using random: inout SeededGenerator) -> String {
        let token = tokens.isEmpty || Int.random(in: 0..<4, using: &random) == 0 ? nil : tokens.randomElement(using: &random)
        let idToken = token.map { "\"\($0.idToken)\"" } ?? RandomJSON.string(using: &random)
        var members = ["\"id_token\":\(idToken)"]
        switch Int.random(in: 0..<5, using: &random) {
        case 0: break
        case 1: members.append("\"nonce\":\"\(token?.nonce ?? BatonBodies.nonce(using: &random))\"")
        case 2: members.append("\"nonce\":\"\(token.map { Digest.sha256Hex(Array($0.nonce.utf8)) } ?? BatonBodies.hex64(using: &random))\"")
        case 3: members.append("\"nonce\":\"\(BatonBodies.hex64(using: &random))\"")
        default: members.append("\"nonce\":\(Bool.random(using: &random) ? "\"\(BatonBodies.nonce(using: &random))\"" : RandomJSON.value(depth: 4, using: &random))")
        }
        if let flow = BatonBodies.flow(using: &random) { members.append("\"nonce_flow\":\(flow)") }
        members.shuffle(using: &random)
        return "{" + members.joined(separator: ",") + "}"
    }

    private func json(_ path: String, _ body: String) -> [UInt8] {
        request("POST", path, contentType: "application/json", body: Array(body.utf8))
    }

    private func answered(_ kind: FuzzCase.Kind, _ requests: [[UInt8]]) -> FuzzCase {
        FuzzCase(kind: kind, pieces: requests.map { RawExchange.Piece(bytes: $0) }, expectation: .answers(count: requests.count), timeoutMilliseconds: 5_000)
    }

    private func anything(_ kind: FuzzCase.Kind, _ requests: [[UInt8]]) -> FuzzCase {
        FuzzCase(kind: kind, pieces: requests.map { RawExchange.Piece(bytes: $0) }, expectation: .anything, timeoutMilliseconds: 50)
    }

    private func randomPath(using random: inout SeededGenerator) -> String {
        if Int.random(in: 0..<10, using: &random) > 0, let path = paths.randomElement(using: &random) {
            return Bool.random(using: &random) ? path : path + "?" + RandomJSON.queryString(using: &random)
        }
        return "/" + RandomJSON.token(using: &random) + (Bool.random(using: &random) ? "/" + RandomJSON.token(using: &random) : "")
    }

    /// A well-formed request: GET, or POST with a JSON or form body, with ordinary headers.
    private func wellFormed(path: String, using random: inout SeededGenerator) -> [UInt8] {
        switch Int.random(in: 0..<3, using: &random) {
        case 0: return head("GET", path, [])
        case 1: return request("POST", path, contentType: "application/json", body: Array(RandomJSON.appleLike(using: &random).utf8))
        default: return request("POST", path, contentType: "application/x-www-form-urlencoded", body: Array(RandomJSON.form(using: &random).utf8))
        }
    }

    private func request(_ method: String, _ path: String, contentType: String, body: [UInt8]) -> [UInt8] {
        head(method, path, ["Content-Type: \(contentType)", "Content-Length: \(body.count)"]) + body
    }

    private func head(_ method: String, _ path: String, _ headers: [String]) -> [UInt8] {
        Array((["\(method) \(path) HTTP/1.1", "Host: \(host)", "User-Agent: baton-fuzz"] + headers).joined(separator: "\r\n").utf8) + Array("\r\n\r\n".utf8)
    }
}

/// The members of Baton's sign-in and link bodies: nonces, flows, a link body, a member of an answer.
enum BatonBodies {
    /// A random nonce: a session-like base64url one, a 64-hex-digit one (a native claim's form), empty, short or odd.
    static func nonce(using random: inout SeededGenerator) -> String {
        let base64URL = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
        switch Int.random(in: 0..<5, using: &random) {
        case 0: return String((0..<43).map { _ in base64URL.randomElement(using: &random)! })
        case 1: return hex64(using: &random)
        case 2: return ""
        case 3: return ["n", "\\u0000", "é😀", "\\ud800", String(repeating: "n", count: 5_000)].randomElement(using: &random)!
        default: return hex64(using: &random).uppercased()
        }
    }

    /// 64 lower-case hex digits.
    static func hex64(using random: inout SeededGenerator) -> String {
        String((0..<64).map { _ in Array("0123456789abcdef").randomElement(using: &random)! })
    }

    /// A `nonce_flow` member's JSON value, or nil to leave it out.
    static func flow(using random: inout SeededGenerator) -> String? {
        ["\"native\"", "\"web\"", "\"web\"", "\"WEB\"", "\"\"", "null", "1", nil, nil].randomElement(using: &random)!
    }

    /// A `POST /v1/link` body with `nonce`: tokens the target accepts or random ones, a flow, members left out now and then.
    static func link(nonce: String, tokens: [FuzzToken], using random: inout SeededGenerator) -> String {
        func token(_ random: inout SeededGenerator) -> String {
            if let token = tokens.randomElement(using: &random), Bool.random(using: &random) { return "\"\(token.idToken)\"" }
            return RandomJSON.string(using: &random)
        }
        var members = ["\"nonce\":\"\(nonce)\"", "\"legacy_id_token\":\(token(&random))", "\"id_token\":\(token(&random))"]
        if let flow = flow(using: &random) { members.append("\"nonce_flow\":\(flow)") }
        if Int.random(in: 0..<8, using: &random) == 0 { members.remove(at: Int.random(in: 0..<members.count, using: &random)) }
        members.shuffle(using: &random)
        return "{" + members.joined(separator: ",") + "}"
    }

    /// The string member `name` of a JSON object answer, if it is one.
    static func member(_ name: String, of body: [UInt8]) -> String? {
        guard let object = try? JSONSerialization.jsonObject(with: Data(body)) as? [String: Any] else { return nil }
        return object[name] as? String
    }
}

/// Random JSON texts, form bodies and tokens.
enum RandomJSON {
    private static let names = ["client_id", "client_secret", "user", "nonce", "nonce_flow", "sub", "transfer_sub", "target", "id_token", "legacy_id_token", "payload",
                                "grant_type", "scope", "team_id", "email", "state", "", "a\u{0}b", "\u{1F600}", "__proto__"]

    /// Any JSON value, nested up to a few levels (and now and then very deep).
    static func value(depth: Int, using random: inout SeededGenerator) -> String {
        let choice = Int.random(in: 0..<(depth > 4 ? 6 : 9), using: &random)
        switch choice {
        case 0: return ["null", "true", "false"].randomElement(using: &random)!
        case 1: return number(using: &random)
        case 2, 3, 4, 5: return string(using: &random)
        case 6:
            if Int.random(in: 0..<40, using: &random) == 0 {
                let levels = Int.random(in: 20...5_000, using: &random)
                return String(repeating: "[", count: levels) + String(repeating: "]", count: levels)
            }
            return "[" + (0..<Int.random(in: 0...6, using: &random)).map { _ in value(depth: depth + 1, using: &random) }.joined(separator: ",") + "]"
        default:
            return "{" + (0..<Int.random(in: 0...6, using: &random)).map { _ in
                "\"\(names.randomElement(using: &random)!)\":\(value(depth: depth + 1, using: &random))"
            }.joined(separator: ",") + "}"
        }
    }

    /// An object with the member names Apple's endpoints and the emulator read, and random values.
    static func appleLike(using random: inout SeededGenerator) -> String {
        "{" + (0..<Int.random(in: 0...5, using: &random)).map { _ in
            "\"\(names.randomElement(using: &random)!)\":\(Bool.random(using: &random) ? string(using: &random) : value(depth: 3, using: &random))"
        }.joined(separator: ",") + "}"
    }

    /// A form-encoded body with the members of `/auth/token` and `/auth/usermigrationinfo`, some broken.
    static func form(using random: inout SeededGenerator) -> String {
        (0..<Int.random(in: 0...5, using: &random)).map { _ in
            let name = ["grant_type", "scope", "client_id", "client_secret", "sub", "target", "transfer_sub", "%zz", "a+b"].randomElement(using: &random)!
            return name + "=" + queryString(using: &random)
        }.joined(separator: "&")
    }

    static func number(using random: inout SeededGenerator) -> String {
        ["0", "-0", "1", "-1", "1e308", "1e400", "-1e-400", "0.1", "123456789012345678901234567890", "9007199254740993", "1E+2", "2.5e-3",
         String(Int.random(in: Int.min...Int.max, using: &random)), String(Double.random(in: -1e9...1e9, using: &random))].randomElement(using: &random)!
    }

    static func string(using random: inout SeededGenerator) -> String {
        let pieces = ["a", "Z", "0", " ", "\\\"", "\\\\", "\\/", "\\n", "\\u0000", "\\u00e9", "\\ud83d\\ude00", "\\ud800", "é", "😀", "%00",
                      "com.example.app", "001234.0123456789abcdef0123456789abcdef.1234", "eyJhbGciOiJSUzI1NiJ9.e30.", "<script>", "'; DROP TABLE users; --"]
        var text = ""
        for _ in 0..<Int.random(in: 0...8, using: &random) { text += pieces.randomElement(using: &random)! }
        if Int.random(in: 0..<50, using: &random) == 0 { text += String(repeating: "x", count: Int.random(in: 1_000...70_000, using: &random)) }
        return "\"" + text + "\""
    }

    static func token(using random: inout SeededGenerator) -> String {
        ["auth", "keys", "v1", "..", "%2e%2e", "emulator", "%00", "a", "signin", String(repeating: "x", count: 300), "🙂"].randomElement(using: &random)!
    }

    static func queryString(using random: inout SeededGenerator) -> String {
        ["", "a=b", "user=%ZZ", "user=001234.x.1", "a=1&a=2", "=", "&&", "%", "x=" + String(repeating: "y", count: 2_000)].randomElement(using: &random)!
    }
}

/// Byte-level mutations: flips, insertions, deletions, duplications, truncation.
enum Mutator {
    static func mutate(_ input: [UInt8], using random: inout SeededGenerator) -> [UInt8] {
        var bytes = input
        for _ in 0..<Int.random(in: 1...8, using: &random) {
            guard !bytes.isEmpty else { bytes = [UInt8.random(in: 0...255, using: &random)]; continue }
            let position = Int.random(in: 0..<bytes.count, using: &random)
            switch Int.random(in: 0..<6, using: &random) {
            case 0: bytes[position] ^= UInt8(1) << UInt8.random(in: 0...7, using: &random)
            case 1: bytes[position] = [0, 10, 13, 32, 58, 34, 123, 125, 255].randomElement(using: &random)!
            case 2: bytes.insert(UInt8.random(in: 0...255, using: &random), at: position)
            case 3: bytes.remove(at: position)
            case 4:
                let end = min(bytes.count, position + Int.random(in: 1...64, using: &random))
                bytes.insert(contentsOf: bytes[position..<end], at: position)
            default: bytes.removeSubrange(position...)
            }
        }
        return bytes
    }
}

/// Requests that break HTTP/1.1 on purpose.
enum BrokenHTTP {
    static func requestLine(path: String, host: String, using random: inout SeededGenerator) -> [UInt8] {
        let lines = [
            "GET \(path)", "GET \(path) HTTP/9.9", "GET \(path) HTTP/1.1 extra", "GET  \(path)  HTTP/1.1", " GET \(path) HTTP/1.1",
            "G\u{0}T \(path) HTTP/1.1", "\(String(repeating: "A", count: 5_000)) \(path) HTTP/1.1", "GET /\(String(repeating: "p", count: 40_000)) HTTP/1.1",
            "GET \(path) HTTP/1.1\n", "BREW \(path) HTTP/1.1", "GET http://\(host)\(path) HTTP/1.1", "GET * HTTP/1.1", "\r\n\r\nGET \(path) HTTP/1.1",
            "GET \(path)\u{7F} HTTP/1.1", "POST \(path) HTTP/1.0", "GET \(path) HTTP/1.1\r\nHost: a\r\nHost: b", "",
        ]
        let lineEnding = Bool.random(using: &random) ? "\r\n" : "\n"
        return Array((lines.randomElement(using: &random)! + lineEnding + "Host: \(host)" + lineEnding + lineEnding).utf8)
    }

    static func hugeHeaders(path: String, host: String, using random: inout SeededGenerator) -> [UInt8] {
        var head = "GET \(path) HTTP/1.1\r\nHost: \(host)\r\n"
        switch Int.random(in: 0..<5, using: &random) {
        case 0: head += "X-Big: " + String(repeating: "b", count: Int.random(in: 8_000...70_000, using: &random)) + "\r\n"
        case 1: for index in 0..<Int.random(in: 100...3_000, using: &random) { head += "X-H\(index): v\r\n" }
        case 2: head += "X-Fold: a\r\n " + String(repeating: "continued ", count: 500) + "\r\n"
        case 3: head += "NoColonHere\r\n: empty-name\r\nX-Ctl: a\u{1}b\r\n"
        default: head += "Content-Length: 5\r\nContent-Length: 7\r\n"
        }
        return Array((head + "\r\n").utf8)
    }

    static func chunked(path: String, host: String, using random: inout SeededGenerator) -> [UInt8] {
        let head = "POST \(path) HTTP/1.1\r\nHost: \(host)\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n"
        let bodies = [
            "\r\nzz\r\n{}\r\n0\r\n\r\n", "\r\n-1\r\n{}\r\n0\r\n\r\n", "\r\nffffffffffffffff\r\n{}\r\n0\r\n\r\n", "\r\n2\r\n{}\r\n",
            "\r\n2;ext=\u{1}\r\n{}\r\n0\r\n\r\n", "\r\n5\r\n{}\r\n0\r\n\r\n", "\r\n2\r\n{}0\r\n\r\n", "Content-Length: 2\r\n\r\n2\r\n{}\r\n0\r\n\r\n",
            "\r\n2\r\n{}\r\n0\r\nTrailer: x\r\n\r\n", "\r\n100000\r\n" + String(repeating: "a", count: 2_000), "\r\n2\n{}\n0\n\n", "\r\n 2\r\n{}\r\n0\r\n\r\n",
            "\r\n2\r\n{}\r\n0\r\n\r\nGET / HTTP/1.1\r\n\r\n",
        ]
        return Array((head + bodies.randomElement(using: &random)!).utf8)
    }
}
