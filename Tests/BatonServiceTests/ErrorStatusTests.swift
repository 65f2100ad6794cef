import BatonAppleSignIn
import Baton
import BatonHTTPServer
import BatonJOSE
import BatonLogging
import BatonPostgres
import BatonService
import Synchronization
import Testing

/// The statuses `baton serve` answers each error code with (`ErrorStatuses.swift`), and the middleware that counts
/// and logs a route's thrown error.
@Suite("Error statuses of the service")
struct ErrorStatusTests {
    /// Every code the engine or the request checks throw, with the status and extra headers it is answered with.
    static var table: [(error: any HTTPResponseError, status: Int, headers: HTTPHeaders)] {
        let engine: [(BatonErrorCode, Int)] = [
            (.invalidToken, 401), (.nonceReused, 401), (.staleToken, 401), (.conflict, 409), (.notLinkable, 409),
            (.legacyRecordMissing, 404), (.invalidNotification, 400), (.invalidRequest, 400), (.databaseUnavailable, 503),
            (.keysUnavailable, 503), (.tooManyLinkSessions, 503), (.invalidLegacyTable, 500),
            (.inconsistentDatabaseAnswer, 500), (.notConfigured, 501),
        ]
        let request: [(RequestErrorCode, Int, HTTPHeaders)] = [
            (.missingField, 400, [:]), (.invalidJSON, 400, [:]), (.unsupportedMediaType, 415, [:]),
            (.unauthorized, 401, ["WWW-Authenticate": "Bearer"]), (.forbidden, 403, [:]),
        ]
        return engine.map { (BatonError($0.0, "why"), $0.1, [:]) } + request.map { (RequestError($0.0, "why"), $0.1, $0.2) }
    }

    @Test("the table names every code of BatonErrorCode and RequestErrorCode once")
    func tableIsComplete() {
        let codes = Self.table.map(\.error.errorCode)
        #expect(codes.count == Set(codes).count)
        #expect(Set(codes) == Set(BatonErrorCode.allCases.map(\.rawValue) + RequestErrorCode.allCases.map(\.rawValue)))
    }

    @Test("each code is answered with its status, its headers and {\"error\": code, \"reason\": reason}")
    func answers() {
        for row in Self.table {
            // What the service answered when each status was written where the error was thrown.
            let expected = HTTPError(row.status, code: row.error.errorCode, reason: "why", headers: row.headers).response
            #expect(row.error.response == expected, "\(row.error.errorCode)")
        }
    }

    @Test("metrics and the log line see each route's thrown error, at once or from the task, as the router answers it")
    func middlewareSeesTheThrownError() async throws {
        let lines = Mutex<[String]>([])
        let logger = Logger(label: "test", level: .info, handler: Logger.lines { line in lines.withLock { $0.append(line) } })
        let pool = PostgresPool(url: "postgresql:///none?host=/nonexistent-baton-socket-dir", maxConnections: 1, acquireTimeout: .seconds(2))
        let legacy = try BatonConfiguration.Legacy(table: "public.users", keyColumn: "id", subjectColumn: "apple_sub", emailColumn: "email").identifiers()
        let engine = BatonEngine(store: LegacyStore(pool: pool, legacy: legacy), keys: FixedKeySet(JWKSet(keys: [])),
                                 clientIDs: ["com.example.app"], legacyClientIDs: ["com.example.oldweb"], pool: pool)
        let withAdmin = BatonAPI(engine: engine, adminToken: AdminToken("error-status-test-admin-token"), logger: logger)
        let withoutAdmin = BatonAPI(engine: engine, adminToken: nil, logger: logger)
        let json: HTTPHeaders = ["Content-Type": "application/json"]
        let cases: [(BatonAPI, HTTPRequest, route: String, status: Int, error: String)] = [
            (withAdmin, HTTPRequest(method: "POST", path: "/v1/signin", headers: ["Content-Type": "text/plain"]), "signin", 415, "unsupported_media_type"),
            (withAdmin, HTTPRequest(method: "POST", path: "/v1/signin", headers: json, body: Array("[]".utf8)), "signin", 400, "invalid_json"),
            (withAdmin, HTTPRequest(method: "POST", path: "/v1/signin", headers: json, body: Array("{}".utf8)), "signin", 400, "missing_field"),
            (withAdmin, HTTPRequest(method: "POST", path: "/v1/signin", headers: json, body: Array(#"{"id_token":"a.b.c","nonce":"n","nonce_flow":"x"}"#.utf8)),
             "signin", 400, "invalid_request"),
            (withAdmin, HTTPRequest(method: "POST", path: "/v1/signin", headers: json, body: Array(#"{"id_token":"a.b.c"}"#.utf8)), "signin", 401, "invalid_token"),
            (withAdmin, HTTPRequest(method: "POST", path: "/v1/link", headers: json, body: Array(#"{"id_token":"a","legacy_id_token":"b"}"#.utf8)),
             "link", 400, "missing_field"),
            (withAdmin, HTTPRequest(method: "GET", path: "/v1/report"), "report", 401, "unauthorized"),
            (withoutAdmin, HTTPRequest(method: "GET", path: "/v1/report"), "report", 403, "forbidden"),
        ]
        for (service, request, route, status, error) in cases {
            let response = await service.router().respond(to: request)
            #expect(response.status == status, "\(request.path) \(error)")
            #expect(response.headers["WWW-Authenticate"] == (error == "unauthorized" ? "Bearer" : nil))
            #expect(service.metrics.render(pool: nil).contains("baton_http_requests_total{route=\"\(route)\",status=\"\(status)\"}"), "\(route) \(status)")
            let line = try #require(lines.withLock { $0.popLast() })
            #expect(line.contains("route=\(route)") && line.contains("status=\(status)"), "\(line)")
            // An invalid token's line names the verifier's reason, any other refusal its code.
            #expect(line.contains("error=\(error == "invalid_token" ? "malformed" : error)"), "\(line)")
        }
        await engine.shutdown()
    }
}
