import Foundation
import BatonJOSE
import BatonJSON
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// Simulated iPhones for `baton demo`: each one does what the app does on a device after the transfer.
///
/// 1. `GET /v1/credential-state?user=OLD_SUB` on Baton → `transferred` (the stored identifier is the old team's);
/// 2. silent re-authorization: `POST /emulator/authorize` with the user → a new identity token carrying `sub`
///    (team B's identifier) and `transfer_sub`;
/// 3. `POST /v1/signin` on Baton with that token → `migrated`.
///
/// Everything is real HTTP on loopback; identifiers and tokens are never printed.
struct DemoDevices: Sendable {
    /// Baton's base URL (`http://127.0.0.1:PORT`).
    let service: URL
    /// The emulator's base URL.
    let apple: URL
    /// The transferred app's client ID.
    let clientID: String
    /// Devices in flight at once.
    let concurrency: Int
    /// Whether a device asks Baton for the credential state first; between companies the recipient's Baton
    /// does not know the sender's identifiers, and the device asks Apple natively (`getCredentialState`).
    var asksCredentialState = true

    /// What the devices saw, counted by answer.
    struct Tally: Sendable {
        /// `GET /v1/credential-state` answers by state (`transferred`, …, or `http NNN`).
        var credentialStates: [String: Int] = [:]
        /// Identity tokens received from the silent re-authorization.
        var tokens = 0
        /// Of those, tokens carrying `transfer_sub`.
        var tokensWithTransferSub = 0
        /// `POST /v1/signin` answers by outcome (`migrated`, `current`, `new`, or `http NNN`).
        var signInOutcomes: [String: Int] = [:]
        /// Devices that could not finish (a request failed or an answer was unexpected).
        var failures = 0
        /// HTTP requests sent.
        var requests = 0

        /// Adds another device's counts.
        mutating func add(_ other: Tally) {
            credentialStates.merge(other.credentialStates, uniquingKeysWith: +)
            tokens += other.tokens
            tokensWithTransferSub += other.tokensWithTransferSub
            signInOutcomes.merge(other.signInOutcomes, uniquingKeysWith: +)
            failures += other.failures
            requests += other.requests
        }
    }

    /// Runs one device per identifier, `concurrency` at a time, and returns the tally.
    func run(users: [String]) async -> Tally {
        let configuration = URLSessionConfiguration.ephemeral
        configuration.httpMaximumConnectionsPerHost = concurrency
        configuration.timeoutIntervalForRequest = 30
        let session = URLSession(configuration: configuration)
        defer { session.finishTasksAndInvalidate() }
        var total = Tally()
        await withTaskGroup(of: Tally.self) { group in
            var next = 0
            while next < min(concurrency, users.count) {
                let user = users[next]
                group.addTask { await device(user, session: session) }
                next += 1
            }
            for await tally in group {
                total.add(tally)
                if next < users.count {
                    let user = users[next]
                    group.addTask { await device(user, session: session) }
                    next += 1
                }
            }
        }
        return total
    }

    /// Lines of the service's `GET /metrics` (Prometheus text) whose metric name is one of `names`.
    func metrics(_ names: Set<String>) async throws -> [String] {
        let (data, response) = try await URLSession.shared.data(from: service.appendingPathComponent("metrics"))
        guard (response as? HTTPURLResponse)?.statusCode == 200 else { return [] }
        return String(decoding: data, as: UTF8.self).split(separator: "\n").map(String.init).filter { line in
            guard let name = line.split(whereSeparator: { $0 == "{" || $0 == " " }).first else { return false }
            return !line.hasPrefix("#") && names.contains(String(name))
        }
    }

    /// The service's `GET /v1/report` (JSON) with the admin token, or nil when it does not answer 200.
    func report(adminToken: String) async throws -> Data? {
        var request = URLRequest(url: service.appendingPathComponent("v1/report"))
        request.setValue("Bearer \(adminToken)", forHTTPHeaderField: "Authorization")
        let (data, response) = try await URLSession.shared.data(for: request)
        return (response as? HTTPURLResponse)?.statusCode == 200 ? data : nil
    }

    /// One device: credential state, silent re-authorization, sign-in.
    private func device(_ oldSub: String, session: URLSession) async -> Tally {
        var tally = Tally()
        do {
            if asksCredentialState {
                var query = URLComponents(url: service.appendingPathComponent("v1/credential-state"), resolvingAgainstBaseURL: false)!
                query.queryItems = [URLQueryItem(name: "user", value: oldSub)]
                tally.requests += 1
                let (stateStatus, stateBody) = try await send(session, URLRequest(url: query.url!))
                let state = stateStatus == 200 ? (jsonObject(stateBody)?["state"]?.stringValue ?? "malformed") : "http \(stateStatus)"
                tally.credentialStates[state, default: 0] += 1
                guard state == "transferred" else {
                    tally.failures += 1
                    return tally
                }
            } else {
                tally.credentialStates["transferred", default: 0] += 1
            }

            tally.requests += 1
            let (authorizeStatus, authorizeBody) = try await send(session, post(apple.appendingPathComponent("emulator/authorize"),
                                                                                  ["client_id": clientID, "user": oldSub]))
            guard authorizeStatus == 200, let answer = jsonObject(authorizeBody), let token = answer["id_token"]?.stringValue else {
                tally.failures += 1
                return tally
            }
            tally.tokens += 1
            if tokenCarriesTransferSub(token) { tally.tokensWithTransferSub += 1 }

            tally.requests += 1
            let (signInStatus, signInBody) = try await send(session, post(service.appendingPathComponent("v1/signin"), ["id_token": token]))
            let outcome = signInStatus == 200 ? (jsonObject(signInBody)?["outcome"]?.stringValue ?? "malformed") : "http \(signInStatus)"
            tally.signInOutcomes[outcome, default: 0] += 1
            if outcome != "migrated" { tally.failures += 1 }
        } catch {
            tally.failures += 1
        }
        return tally
    }

    /// A JSON `POST` of `body` to `url`.
    private func post(_ url: URL, _ body: [String: String]) throws -> URLRequest {
        var request = URLRequest(url: url)
        request.httpMethod = "POST"
        request.setValue("application/json", forHTTPHeaderField: "Content-Type")
        request.httpBody = try JSONEncoder().encode(body)
        return request
    }

    /// Sends `request` and returns the status and body.
    private func send(_ session: URLSession, _ request: URLRequest) async throws -> (Int, Data) {
        let (data, response) = try await session.data(for: request)
        return ((response as? HTTPURLResponse)?.statusCode ?? 0, data)
    }

    /// `data` as a JSON object (read by the strict reader: the answers are the demo's input), or nil.
    private func jsonObject(_ data: Data) -> JSONObject? {
        try? JSON.parseObject(Array(data))
    }

    /// Whether the (unverified) payload of `token` has a `transfer_sub` claim: the device only looks, Baton verifies.
    private func tokenCarriesTransferSub(_ token: String) -> Bool {
        guard let claims = try? CompactJWS.parse(token).claims() else { return false }
        return claims["transfer_sub"]?.stringValue != nil
    }
}
