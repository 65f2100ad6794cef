import BatonAppleSignIn
import Baton
import BatonService
import Foundation
import BatonHTTPServer
import BatonJOSE
import BatonPostgres
import TestSupport
import Testing

/// `docs/openapi.yaml` against the service: the same routes both ways, and the error codes the code uses.
///
/// The spec is read with a small reader for the subset of YAML the file is written in (block mappings with
/// two-space indentation, block lists of scalars); `paths` and the `enum` lists of the named schemas are all
/// it needs. No database is needed: the pool points at a socket that does not exist, so the one route that
/// touches the database (`/readyz`) answers 503 at once.
@Suite("OpenAPI description of the service")
struct OpenAPISpecTests {
    static let specPath = packageRoot.appendingPathComponent("docs/openapi.yaml").path

    /// Error codes the service's own plumbing answers with, besides ``BatonError/Code``: the router's and the
    /// HTTP server's (`HTTPError`), the request decoders', and the service's admin and input checks.
    static let plumbingErrorCodes: Set<String> = [
        "not_found", "method_not_allowed", "payload_too_large", "internal_error",
        "invalid_json", "invalid_form", "missing_field", "unsupported_media_type", "unauthorized", "forbidden",
        "timeout", "shutting_down", "too_many_connections", "request_head_too_large",
    ]

    @Test("every route in the spec exists in the service, and every route of the service is in the spec")
    func routesMatch() async throws {
        let spec = try Spec(path: Self.specPath)
        let (router, engine) = try Self.offlineRouter()
        await engine.shutdown()
        let service = Set(router.routeTable.map { "\($0.method) \($0.path)" })
        let documented = Set(spec.operations)
        #expect(!documented.isEmpty)
        for missing in documented.subtracting(service).sorted() {
            Issue.record("docs/openapi.yaml describes \(missing), which the service does not serve")
        }
        for undocumented in service.subtracting(documented).sorted() {
            Issue.record("the service serves \(undocumented), which docs/openapi.yaml does not describe")
        }
    }

    @Test("every documented operation is dispatched to a handler (never 404 or 405)")
    func operationsDispatch() async throws {
        let spec = try Spec(path: Self.specPath)
        let (router, engine) = try Self.offlineRouter()
        for operation in spec.operations {
            let parts = operation.split(separator: " ", maxSplits: 1).map(String.init)
            let response = await router.respond(to: HTTPRequest(method: parts[0], path: parts[1]))
            #expect(response.status != 404 && response.status != 405, "\(operation) answered \(response.status)")
        }
        await engine.shutdown()
    }

    @Test("the spec's error codes are exactly the ones the service answers with")
    func errorCodes() throws {
        let spec = try Spec(path: Self.specPath)
        // invalid_legacy_table stops `baton serve` at start-up; it is never an HTTP answer.
        let fromEngine = Set(BatonError.Code.allCases.filter { $0 != .invalidLegacyTable }.map(\.rawValue))
        let expected = fromEngine.union(Self.plumbingErrorCodes)
        let documented = Set(try spec.enumeration(schema: "ErrorCode"))
        #expect(documented.subtracting(expected).isEmpty, "in the spec but never answered: \(documented.subtracting(expected).sorted())")
        #expect(expected.subtracting(documented).isEmpty, "answered but missing from the spec: \(expected.subtracting(documented).sorted())")
    }

    @Test("the spec lists every token rejection reason of the verifier, and no other")
    func rejectionReasons() throws {
        let spec = try Spec(path: Self.specPath)
        // keys_unavailable is answered as the 503 error code keys_unavailable, never as an invalid_token reason.
        let expected = Set(VerificationError.Code.allCases.filter { $0 != .keysUnavailable }.map(\.rawValue))
        let documented = Set(try spec.enumeration(schema: "TokenRejectionReason"))
        #expect(documented.subtracting(expected).isEmpty, "in the spec but never answered: \(documented.subtracting(expected).sorted())")
        #expect(expected.subtracting(documented).isEmpty, "answered but missing from the spec: \(expected.subtracting(documented).sorted())")
    }

    @Test("the spec reader finds operations and enumerations, and refuses a file without paths")
    func reader() throws {
        let text = """
            openapi: 3.0.3
            paths:
              /a:
                get:
                  summary: x
                post:
                  summary: y
              /b/c:
                parameters: []
                get:
                  summary: z
            components:
              schemas:
                Kind:
                  type: string
                  enum:
                    - one
                    - "two"
            """
        let spec = try Spec(text: text)
        #expect(spec.operations == ["GET /a", "POST /a", "GET /b/c"])
        #expect(try spec.enumeration(schema: "Kind") == ["one", "two"])
        #expect(throws: SpecError.self) { try spec.enumeration(schema: "Other") }
        #expect(throws: SpecError.self) { try Spec(text: "openapi: 3.0.3\ninfo: {}\n") }
    }

    /// The service's router over an engine whose database is unreachable and whose key set is empty.
    static func offlineRouter() throws -> (Router, BatonEngine) {
        let pool = PostgresPool(url: "postgresql:///none?host=/nonexistent-baton-socket-dir", maxConnections: 1, acquireTimeout: .seconds(2))
        let legacy = try BatonConfiguration.Legacy(table: "public.users", keyColumn: "id", subjectColumn: "apple_sub", emailColumn: "email").identifiers()
        let engine = BatonEngine(store: LegacyStore(pool: pool, legacy: legacy), keys: FixedKeySet(JWKSet(keys: [])),
                                 clientIDs: ["com.example.app"], legacyClientIDs: ["com.example.oldweb"], pool: pool)
        let service = BatonAPI(engine: engine, adminToken: AdminToken("openapi-spec-test-admin-token"))
        return (service.router(), engine)
    }
}

struct SpecError: Error, CustomStringConvertible {
    var description: String
}

/// The parts of an OpenAPI document written in block-style YAML that the tests compare with the code.
struct Spec {
    /// `METHOD /path`, in file order.
    let operations: [String]
    private let lines: [(indent: Int, text: String)]

    static let methods: Set<String> = ["get", "put", "post", "delete", "options", "head", "patch", "trace"]

    init(path: String) throws {
        guard let data = FileManager.default.contents(atPath: path) else { throw SpecError(description: "cannot read \(path)") }
        try self.init(text: String(decoding: data, as: UTF8.self))
    }

    init(text: String) throws {
        lines = text.split(separator: "\n", omittingEmptySubsequences: false).compactMap { raw in
            let line = String(raw)
            let body = line.drop(while: { $0 == " " })
            if body.isEmpty || body.hasPrefix("#") { return nil }
            return (indent: line.count - body.count, text: String(body))
        }
        guard let start = lines.firstIndex(where: { $0.indent == 0 && $0.text == "paths:" }) else {
            throw SpecError(description: "no top-level 'paths:'")
        }
        var found: [String] = []
        var currentPath: String?
        for line in lines[(start + 1)...] {
            if line.indent == 0 { break }
            if line.indent == 2, line.text.hasPrefix("/"), line.text.hasSuffix(":") {
                currentPath = String(line.text.dropLast())
            } else if line.indent == 4, let path = currentPath, let colon = line.text.firstIndex(of: ":"),
                      Spec.methods.contains(String(line.text[..<colon])) {
                found.append("\(line.text[..<colon].uppercased()) \(path)")
            }
        }
        operations = found
    }

    /// The `enum` list of `components.schemas.<schema>`.
    func enumeration(schema: String) throws -> [String] {
        guard let components = lines.firstIndex(where: { $0.indent == 0 && $0.text == "components:" }),
              let schemas = lines[components...].firstIndex(where: { $0.indent == 2 && $0.text == "schemas:" }),
              let named = lines[schemas...].firstIndex(where: { $0.indent == 4 && $0.text == "\(schema):" })
        else { throw SpecError(description: "no schema \(schema)") }
        var index = named + 1
        while index < lines.count, lines[index].indent > 4, lines[index].text != "enum:" { index += 1 }
        guard index < lines.count, lines[index].indent > 4 else { throw SpecError(description: "schema \(schema) has no enum") }
        let enumIndent = lines[index].indent
        var values: [String] = []
        index += 1
        while index < lines.count, lines[index].indent > enumIndent || (lines[index].indent == enumIndent && lines[index].text.hasPrefix("- ")) {
            if lines[index].text.hasPrefix("- ") {
                values.append(String(lines[index].text.dropFirst(2)).trimmingCharacters(in: CharacterSet(charactersIn: "\"' ")))
            }
            index += 1
        }
        return values
    }
}
