import BatonEmulator
import BatonAppleSignIn
import Baton
import BatonReport
import BatonService
import Foundation
import FoundationNetworking
import BatonHTTPServer
import BatonJOSE
import BatonJSON
import BatonPostgres
import TestSupport

/// How a test reaches the service: the router called in-process, or a live server on loopback.
enum Mode: String, CaseIterable, Sendable, CustomStringConvertible {
    case inProcess = "in-process"
    case live
    var description: String { rawValue }
}

/// An answer, with its body parsed as JSON when it is JSON.
struct Reply: Sendable {
    var status: Int
    var json: JSONValue
    var text: String
    var error: String? { json["error"]?.stringValue }
    var reason: String? { json["reason"]?.stringValue }
}

/// One person of the scenario: their sending-team identifier, transfer identifier, and email.
struct Person: Sendable {
    var id: String
    var oldSub: String
    var transferSub: String
    var email: String
}

/// A complete scenario: the emulator with a transferred app, a database with the legacy table holding
/// every person under their sending-team identifier (transfers imported into `baton.transfers`), an
/// engine trusting the emulator's keys plus a local notification key, and the service in `mode`.
final class ServiceFixture: @unchecked Sendable {
    // `@unchecked Sendable`: every stored property is immutable after init; the types are Sendable but
    // the class holds a non-final reference graph the compiler cannot prove.
    static let clientID = EmulatedTransfer.clientID
    /// A Services ID that stayed with the sending team: its tokens are the "legacy" ones of re-linking.
    static let legacyClientID = "com.example.oldweb"
    let mode: Mode
    let emulator: AppleEmulator
    let url: String
    let pool: PostgresPool
    let engine: BatonEngine
    let service: BatonAPI
    let router: Router
    let server: BatonServer?
    let people: [Person]
    let notificationKey: RSAPrivateKey
    static let notificationKID = "notify-test-key"
    static let adminToken = "admin-token-0123456789abcdef"

    init(_ mode: Mode, people count: Int = 6, databaseURL: String? = nil, acceptTransfer: Bool = true,
         requireNonce: Bool = false, serviceToken: String? = nil, onDuplicate: DuplicatePolicy? = nil,
         emailPolicy: EmailPolicy? = nil, prepare: (String) throws -> Void = { _ in }) async throws {
        self.mode = mode
        emulator = try await AppleEmulator.start()
        let transfer = try EmulatedTransfer(on: emulator, users: count, privateEmail: true, accept: acceptTransfer)
        try emulator.createApp(clientID: ServiceFixture.legacyClientID, teamID: transfer.sender.teamID)
        people = transfer.users.map { Person(id: $0.id, oldSub: $0.userIdentifier, transferSub: transfer.transferIdentifiers[$0.userIdentifier]!, email: $0.email) }

        url = try databaseURL ?? TestDatabase.create("service")
        pool = PostgresPool(url: url, maxConnections: 4, acquireTimeout: .seconds(30))
        _ = try await BatonSchema.migrator().migrate(pool)
        let (url, people) = (url, people)
        try await offPool {
            try TestDatabase.createUsersTable(url, subjects: people.map(\.oldSub), emails: people.map(\.email))
            try TestDatabase.addTransfers(url, transfer.transferIdentifiers)
        }
        try prepare(url)
        let acceptedAt = transfer.acceptedAt

        notificationKey = try RSAPrivateKey.generate(bits: 2048)
        let local = JWK(key: .rsa(notificationKey.publicKey), kid: ServiceFixture.notificationKID, use: "sig", alg: "RS256")
        let keys = FixedKeySet(JWKSet(keys: emulator.jwks.keys + [local]))
        let legacyTable = BatonConfiguration.Legacy(table: "public.users", keyColumn: "id", subjectColumn: "apple_sub",
                                                    emailColumn: "email", transferColumn: "transfer_sub", emailPolicy: emailPolicy,
                                                    onDuplicate: onDuplicate)
        let store = LegacyStore(pool: pool, legacy: try legacyTable.identifiers())
        try await store.validateLegacyTable()
        let pool = self.pool
        engine = BatonEngine(store: store, keys: keys, clientIDs: [ServiceFixture.clientID], legacyClientIDs: [ServiceFixture.legacyClientID],
                             requireNonce: requireNonce, pool: pool, transferAcceptedAt: acceptedAt)
        let reportBuilder: @Sendable (Date, Date?) -> ReportBuilder = { now, _ in ReportBuilder(pool: pool, legacy: legacyTable, acceptedAt: nil, now: now) }
        switch mode {
        case .inProcess:
            service = BatonAPI(engine: engine, adminToken: AdminToken(ServiceFixture.adminToken), serviceToken: serviceToken.flatMap(AdminToken.init),
                               reportBuilder: reportBuilder)
            router = service.router()
            server = nil
        case .live:
            let server = try await BatonServer.start(engine: engine, adminToken: AdminToken(ServiceFixture.adminToken),
                                                     serviceToken: serviceToken.flatMap(AdminToken.init), reportBuilder: reportBuilder)
            self.server = server
            service = server.service
            router = service.router()
        }
    }

    /// Runs `body` with a fresh fixture (arguments as ``init(_:people:databaseURL:acceptTransfer:)``) and closes
    /// it afterwards, whatever happens.
    static func run(_ mode: Mode, people count: Int = 6, databaseURL: String? = nil, acceptTransfer: Bool = true,
                    requireNonce: Bool = false, serviceToken: String? = nil,
                    _ body: (ServiceFixture) async throws -> Void) async throws {
        let fixture = try await ServiceFixture(mode, people: count, databaseURL: databaseURL, acceptTransfer: acceptTransfer,
                                               requireNonce: requireNonce, serviceToken: serviceToken)
        try await withTeardown(fixture, teardown: { await $0.close() }, body)
    }

    func close() async {
        service.stopReadinessChecks()
        if let server { await server.stop() } else { await engine.shutdown() }
        await emulator.stop()
    }

    /// A fresh identity token for `person` under the app's current team.
    func token(_ person: Person, nonce: String? = nil) throws -> String {
        try emulator.authorize(clientID: ServiceFixture.clientID, user: person.id, nonce: nonce).idToken
    }

    /// A fresh identity token for `person` from the sending team's Services ID (a re-link's legacy token).
    func legacyToken(_ person: Person, nonce: String? = nil) throws -> String {
        try emulator.authorize(clientID: ServiceFixture.legacyClientID, user: person.id, nonce: nonce).idToken
    }

    /// The current team's identifier of `person` (signs them in once on the emulator to learn it).
    func newSub(_ person: Person) throws -> String {
        try emulator.authorize(clientID: ServiceFixture.clientID, user: person.id).userIdentifier
    }

    /// Sends a request in the fixture's mode.
    func send(_ method: String, _ path: String, query: [String: String] = [:], contentType: String? = nil,
              headers: [String: String] = [:], body: [UInt8] = []) async throws -> Reply {
        var fields = headers
        if let contentType { fields["Content-Type"] = contentType }
        switch mode {
        case .inProcess:
            let request = HTTPRequest(method: method, path: path, query: query, headers: HTTPHeaders(fields.map { ($0.key, $0.value) }), body: body)
            let response = await router.respond(to: request)
            return Reply(status: response.status, json: (try? JSON.parse(response.body)) ?? .null, text: String(decoding: response.body, as: UTF8.self))
        case .live:
            var components = URLComponents(string: "http://127.0.0.1:\(server!.port)\(path)")!
            if !query.isEmpty { components.queryItems = query.map { URLQueryItem(name: $0.key, value: $0.value) } }
            var request = URLRequest(url: components.url!)
            request.httpMethod = method
            if !body.isEmpty { request.httpBody = Data(body) }
            for (name, value) in fields { request.setValue(value, forHTTPHeaderField: name) }
            let (data, response) = try await URLSession.shared.data(for: request)
            let status = (response as! HTTPURLResponse).statusCode
            return Reply(status: status, json: (try? JSON.parse(Array(data))) ?? .null, text: String(decoding: data, as: UTF8.self))
        }
    }

    /// `/readyz`, asked every 50 ms until it answers `status` (it is refreshed in the background), 5 s at most.
    func readyz(expecting status: Int) async throws -> Reply {
        var reply = try await send("GET", "/readyz")
        let deadline = ContinuousClock.now + .seconds(5)
        while reply.status != status, ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(50))
            reply = try await send("GET", "/readyz")
        }
        return reply
    }

    func postJSON(_ path: String, _ object: JSONObject) async throws -> Reply {
        try await send("POST", path, contentType: "application/json", body: JSON.serializeBytes(.object(object)))
    }

    func signIn(_ token: String, nonce: String? = nil, flow: String? = nil) async throws -> Reply {
        var object: JSONObject = ["id_token": .string(token)]
        if let nonce { object["nonce"] = .string(nonce) }
        if let flow { object["nonce_flow"] = .string(flow) }
        return try await postJSON("/v1/signin", object)
    }

    /// A server-to-server notification signed with the local key.
    func notification(type: String, sub: String, eventsAsString: Bool = true, audience: String = ServiceFixture.clientID,
                      audienceClaim: JSONValue? = nil, at instant: Date = Date()) throws -> String {
        let events: JSONObject = ["type": .string(type), "sub": .string(sub), "event_time": .number((instant.timeIntervalSince1970 * 1000).rounded(.down))]
        let claims: JSONObject = [
            "iss": "https://appleid.apple.com", "aud": audienceClaim ?? .string(audience), "iat": .number(instant.timeIntervalSince1970.rounded(.down)),
            "jti": .string(UUID().uuidString),
            "events": eventsAsString ? .string(JSON.serialize(.object(events))) : .object(events),
        ]
        return try JWS.signRS256(payload: JSON.serializeBytes(.object(claims)), key: notificationKey, kid: ServiceFixture.notificationKID)
    }

    func count(_ sql: String) throws -> Int { Int(try TestDatabase.psql(url, sql)) ?? -1 }
}
