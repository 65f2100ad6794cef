import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Synchronization

/// One form-encoded `POST` to Apple, as the client builds it. Its body holds the client secret and its
/// `Authorization` header the access token, so printing it shows only the URL.
public struct AppleHTTPRequest: Sendable, CustomStringConvertible, CustomReflectable {
    /// The endpoint.
    public var url: URL
    /// Header fields (`Content-Type`, `Authorization`, …).
    public var headers: [String: String]
    /// The `application/x-www-form-urlencoded` body.
    public var body: Data

    /// Creates a request.
    public init(url: URL, headers: [String: String], body: Data) {
        self.url = url
        self.headers = headers
        self.body = body
    }

    /// `POST https://appleid.apple.com/auth/token`: no header values, no body.
    public var description: String { "POST \(url.absoluteString)" }

    /// Only the URL, so `dump` shows no secret either.
    public var customMirror: Mirror { Mirror(self, children: ["url": url]) }
}

/// Apple's answer: status, header fields (names lower-cased), body.
public struct AppleHTTPResponse: Sendable {
    /// The HTTP status code.
    public var status: Int
    /// Header fields, names lower-cased.
    public var headers: [String: String]
    /// The body.
    public var body: Data

    /// Creates a response; header names are lower-cased.
    public init(status: Int, headers: [String: String], body: Data) {
        self.status = status
        self.headers = Dictionary(headers.map { ($0.key.lowercased(), $0.value) }, uniquingKeysWith: { first, _ in first })
        self.body = body
    }
}

/// Why a request got no HTTP answer at all. Kept beside `CodedError`: no answer is what the client retries and the
/// key-set fetcher reports, apart from any answer Apple gave (``AppleClientError``).
public enum AppleTransportError: Error, Equatable, CustomStringConvertible {
    /// No answer within the per-request timeout.
    case timeout
    /// The connection could not be made or was lost, or the answer was abandoned (a body past the transport's
    /// size limit); the text is the reason (no request content).
    case connectionFailed(String)

    /// `timed out`, or the reason the connection failed.
    public var description: String {
        switch self {
        case .timeout: "timed out"
        case .connectionFailed(let reason): reason
        }
    }
}

/// Sends one request and returns Apple's answer: the seam between ``AppleClient``'s retry and caching logic
/// and the network. ``URLSessionAppleTransport`` is the real one.
public protocol AppleTransport: Sendable {
    /// Sends `request` once (no retries).
    /// - Throws: ``AppleTransportError`` when no HTTP answer arrives.
    func send(_ request: AppleHTTPRequest) async throws -> AppleHTTPResponse
}

/// The one HTTP client of this module, for Apple's REST calls and for its key set (``HTTPKeySetFetcher``): one
/// `URLSession` per transport, so connections are kept alive and reused; a whole-request timeout; no cookies,
/// no cache, no redirects (a redirect would carry the secret elsewhere: the 3xx itself is the answer); a cap on
/// the body, past which the answer is abandoned unread.
public final class URLSessionAppleTransport: AppleTransport {
    private let session: URLSession
    private let delegate: TransportDelegate
    private let timeout: TimeInterval

    /// Creates the transport.
    /// - Parameters:
    ///   - timeout: the whole request's time limit, in seconds; default 10.
    ///   - maxConnectionsPerHost: connections kept open to Apple; default 8.
    ///   - maxBodyBytes: the largest answer body accepted, in bytes; default 1 MiB.
    public init(timeout: TimeInterval = 10, maxConnectionsPerHost: Int = 8, maxBodyBytes: Int = 1 << 20) {
        let configuration = URLSessionConfiguration.ephemeral
        configuration.timeoutIntervalForRequest = timeout
        configuration.timeoutIntervalForResource = timeout
        configuration.httpMaximumConnectionsPerHost = maxConnectionsPerHost
        configuration.httpCookieAcceptPolicy = .never
        configuration.httpShouldSetCookies = false
        configuration.httpCookieStorage = nil
        configuration.urlCache = nil
        configuration.requestCachePolicy = .reloadIgnoringLocalCacheData
        self.delegate = TransportDelegate(maxBodyBytes: maxBodyBytes)
        self.session = URLSession(configuration: configuration, delegate: delegate, delegateQueue: nil)
        self.timeout = timeout
    }

    deinit {
        session.finishTasksAndInvalidate()
    }

    /// Sends `request` once, as a `POST`.
    /// - Throws: ``AppleTransportError``.
    public func send(_ request: AppleHTTPRequest) async throws -> AppleHTTPResponse {
        try await send("POST", url: request.url, headers: request.headers, body: request.body)
    }

    /// Sends one request with any method and returns the answer, whatever its status (a refused redirect's 3xx
    /// included).
    /// - Throws: ``AppleTransportError``, or `CancellationError` when the task is cancelled.
    func send(_ method: String, url: URL, headers: [String: String], body: Data? = nil) async throws -> AppleHTTPResponse {
        var urlRequest = URLRequest(url: url, cachePolicy: .reloadIgnoringLocalCacheData, timeoutInterval: timeout)
        urlRequest.httpMethod = method
        for (name, value) in headers {
            urlRequest.setValue(value, forHTTPHeaderField: name)
        }
        urlRequest.httpBody = body
        let task = session.dataTask(with: urlRequest)
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { continuation in
                if Task.isCancelled { return continuation.resume(throwing: CancellationError()) }
                delegate.start(task, continuation)
            }
        } onCancel: {
            task.cancel()
        }
    }
}

/// Collects the answers of a ``URLSessionAppleTransport``'s tasks: refuses redirects, abandons a body past the
/// size limit, and resumes each task's caller once it completes.
private final class TransportDelegate: NSObject, URLSessionDataDelegate, Sendable {
    /// One task in progress: its caller and what has arrived so far.
    private struct Exchange: Sendable {
        var continuation: CheckedContinuation<AppleHTTPResponse, any Error>
        var body = Data()
        var oversize = false
    }

    private let maxBodyBytes: Int
    private let exchanges = Mutex<[Int: Exchange]>([:])

    init(maxBodyBytes: Int) {
        self.maxBodyBytes = maxBodyBytes
    }

    /// Records the caller of `task`, then starts it.
    func start(_ task: URLSessionDataTask, _ continuation: CheckedContinuation<AppleHTTPResponse, any Error>) {
        exchanges.withLock { $0[task.taskIdentifier] = Exchange(continuation: continuation) }
        task.resume()
    }

    func urlSession(_ session: URLSession, task: URLSessionTask, willPerformHTTPRedirection response: HTTPURLResponse,
                    newRequest request: URLRequest, completionHandler: @escaping @Sendable (URLRequest?) -> Void) {
        completionHandler(nil)
    }

    func urlSession(_ session: URLSession, dataTask: URLSessionDataTask, didReceive response: URLResponse,
                    completionHandler: @escaping @Sendable (URLSession.ResponseDisposition) -> Void) {
        guard response.expectedContentLength > Int64(maxBodyBytes) else { return completionHandler(.allow) }
        exchanges.withLock { $0[dataTask.taskIdentifier]?.oversize = true }
        completionHandler(.cancel)
    }

    func urlSession(_ session: URLSession, dataTask: URLSessionDataTask, didReceive data: Data) {
        let id = dataTask.taskIdentifier
        let oversize = exchanges.withLock { exchanges -> Bool in
            // Appended in place, so the body is never copied.
            guard exchanges[id]?.oversize == false, let count = exchanges[id]?.body.count else { return false }
            guard count + data.count <= maxBodyBytes else {
                exchanges[id]?.oversize = true
                return true
            }
            exchanges[id]?.body.append(data)
            return false
        }
        if oversize { dataTask.cancel() }
    }

    func urlSession(_ session: URLSession, task: URLSessionTask, didCompleteWithError error: (any Error)?) {
        guard let exchange = exchanges.withLock({ $0.removeValue(forKey: task.taskIdentifier) }) else { return }
        exchange.continuation.resume(with: Result {
            if exchange.oversize { throw AppleTransportError.connectionFailed("answer larger than \(maxBodyBytes) bytes") }
            if let error = error as? URLError {
                if error.code == .cancelled { throw CancellationError() }
                if error.code == .timedOut { throw AppleTransportError.timeout }
                throw AppleTransportError.connectionFailed(Self.reason(error.code))
            }
            if error != nil { throw AppleTransportError.connectionFailed("transport error") }
            guard let http = task.response as? HTTPURLResponse else { throw AppleTransportError.connectionFailed("not an HTTP response") }
            var headers: [String: String] = [:]
            for (name, value) in http.allHeaderFields {
                if let name = name as? String, let value = value as? String { headers[name] = value }
            }
            return AppleHTTPResponse(status: http.statusCode, headers: headers, body: exchange.body)
        })
    }

    private static func reason(_ code: URLError.Code) -> String {
        switch code {
        case .cannotConnectToHost: "cannot connect to host"
        case .cannotFindHost, .dnsLookupFailed: "cannot resolve host"
        case .networkConnectionLost: "connection lost"
        case .notConnectedToInternet: "no network"
        case .secureConnectionFailed, .serverCertificateUntrusted, .serverCertificateHasBadDate, .serverCertificateNotYetValid,
             .serverCertificateHasUnknownRoot, .clientCertificateRejected, .clientCertificateRequired:
            "TLS failure"
        default: "URL error \(code.rawValue)"
        }
    }
}
