import BatonAppleSignIn
import Foundation
import BatonLogging
import Synchronization

/// A clock tests move by hand; `sleep` records the wait and moves the clock by it instead of waiting.
final class FakeClock: Sendable {
    private let state: Mutex<(now: Date, sleeps: [TimeInterval])>

    init(_ start: Date = Date(timeIntervalSince1970: 1_800_000_000)) {
        state = Mutex((start, []))
    }

    var now: Date { state.withLock { $0.now } }
    var sleeps: [TimeInterval] { state.withLock { $0.sleeps } }

    func advance(_ seconds: TimeInterval) {
        state.withLock { $0.now = $0.now.addingTimeInterval(seconds) }
    }

    func sleep(_ seconds: TimeInterval) {
        state.withLock {
            $0.sleeps.append(seconds)
            $0.now = $0.now.addingTimeInterval(seconds)
        }
    }
}

/// A signer that makes recognisable fake secrets and counts them.
final class FakeSigner: ClientSecretSigner {
    let teamID: String
    let keyID: String
    let clientID: String
    private let made = Mutex<[Date]>([])

    init(teamID: String = "BBBBBBBBBB", keyID: String = "KEYB000001", clientID: String = "com.example.app") {
        self.teamID = teamID
        self.keyID = keyID
        self.clientID = clientID
    }

    var issuedAt: [Date] { made.withLock { $0 } }

    func clientSecret(issuedAt: Date, lifetime: TimeInterval) throws -> String {
        let count = made.withLock { list in
            list.append(issuedAt)
            return list.count
        }
        return "secret-\(count)-SECRETMATERIAL"
    }
}

/// A transport that answers from a script per endpoint and records every request.
final class ScriptedTransport: AppleTransport {
    /// One scripted outcome.
    enum Step: Sendable {
        case respond(Int, String, headers: [String: String] = [:])
        case fail(AppleTransportError)
    }

    private struct State {
        var scripts: [String: [Step]] = [:]
        var requests: [AppleHTTPRequest] = []
        var tokenCounter = 0
    }

    private let state = Mutex(State())
    /// Seconds to wait (really) before answering `/auth/token`, to make concurrent callers overlap.
    let tokenDelay: TimeInterval

    init(tokenDelay: TimeInterval = 0) {
        self.tokenDelay = tokenDelay
    }

    /// Queues `steps` for the endpoint whose last path component is `name` (`token`, `usermigrationinfo`).
    func script(_ name: String, _ steps: [Step]) {
        state.withLock { $0.scripts[name, default: []].append(contentsOf: steps) }
    }

    var requests: [AppleHTTPRequest] { state.withLock { $0.requests } }

    func requests(to name: String) -> [AppleHTTPRequest] {
        requests.filter { $0.url.lastPathComponent == name }
    }

    /// The form fields of a request body.
    static func fields(_ request: AppleHTTPRequest) -> [String: String] {
        var fields: [String: String] = [:]
        for pair in String(decoding: request.body, as: UTF8.self).split(separator: "&") {
            let parts = pair.split(separator: "=", maxSplits: 1).map { String($0).removingPercentEncoding ?? "" }
            fields[parts[0]] = parts.count > 1 ? parts[1] : ""
        }
        return fields
    }

    func send(_ request: AppleHTTPRequest) async throws -> AppleHTTPResponse {
        let name = request.url.lastPathComponent
        if name == "token" && tokenDelay > 0 {
            try await Task.sleep(nanoseconds: UInt64(tokenDelay * 1e9))
        }
        let step: Step? = state.withLock { state in
            state.requests.append(request)
            if var queue = state.scripts[name], !queue.isEmpty {
                let step = queue.removeFirst()
                state.scripts[name] = queue
                return step
            }
            if name == "token" {
                state.tokenCounter += 1
                return .respond(200, #"{"access_token":"TOKEN-\#(state.tokenCounter)-SECRET","token_type":"Bearer","expires_in":3600}"#)
            }
            return nil
        }
        switch step {
        case .respond(let status, let body, let headers)?:
            return AppleHTTPResponse(status: status, headers: headers, body: Data(body.utf8))
        case .fail(let error)?:
            throw error
        case nil:
            return AppleHTTPResponse(status: 404, headers: [:], body: Data())
        }
    }
}

/// Collects log lines.
final class LogCapture: Sendable {
    private let lines = Mutex<[String]>([])
    var all: [String] { lines.withLock { $0 } }

    var logger: Logger {
        Logger(label: "test", level: .trace, handler: Logger.lines { [self] line in lines.withLock { $0.append(line) } })
    }
}

/// A client over `transport` with the fake clock, no real sleeping and a fixed jitter of 0.5.
func makeClient(
    _ transport: ScriptedTransport,
    clock: FakeClock,
    signer: FakeSigner = FakeSigner(),
    retry: RetryPolicy = RetryPolicy(),
    logs: LogCapture = LogCapture()
) -> AppleClient {
    AppleClient(
        baseURL: URL(string: "https://apple.test")!,
        credentials: signer,
        options: AppleClient.Options(retry: retry),
        logger: logs.logger,
        transport: transport,
        now: { clock.now },
        sleep: { clock.sleep($0) },
        jitter: { 0.5 }
    )
}
