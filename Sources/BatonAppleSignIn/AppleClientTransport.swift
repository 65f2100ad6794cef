import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

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

/// Why a request got no HTTP answer at all.
public enum AppleTransportError: Error, Equatable {
    /// No answer within the per-request timeout.
    case timeout
    /// The connection could not be made or was lost; the text is the system's reason (no request content).
    case connectionFailed(String)
}

/// Sends one request and returns Apple's answer: the seam between ``AppleClient``'s retry and caching logic
/// and the network. ``URLSessionAppleTransport`` is the real one.
public protocol AppleTransport: Sendable {
    /// Sends `request` once (no retries).
    /// - Throws: ``AppleTransportError`` when no HTTP answer arrives.
    func send(_ request: AppleHTTPRequest) async throws -> AppleHTTPResponse
}

/// The transport over `URLSession`: one session per client, so connections are kept alive and reused; a
/// per-request timeout; no cookies, no cache, no redirects (a redirect would carry the secret elsewhere).
public final class URLSessionAppleTransport: AppleTransport {
    private let session: URLSession
    private let timeout: TimeInterval

    /// Creates the transport.
    /// - Parameters:
    ///   - timeout: the whole request's time limit, in seconds; default 10.
    ///   - maxConnectionsPerHost: connections kept open to Apple; default 8.
    public init(timeout: TimeInterval = 10, maxConnectionsPerHost: Int = 8) {
        let configuration = URLSessionConfiguration.ephemeral
        configuration.timeoutIntervalForRequest = timeout
        configuration.timeoutIntervalForResource = timeout
        configuration.httpMaximumConnectionsPerHost = maxConnectionsPerHost
        configuration.httpCookieAcceptPolicy = .never
        configuration.httpShouldSetCookies = false
        configuration.urlCache = nil
        configuration.requestCachePolicy = .reloadIgnoringLocalCacheData
        self.session = URLSession(configuration: configuration, delegate: RefuseRedirects(), delegateQueue: nil)
        self.timeout = timeout
    }

    deinit {
        session.finishTasksAndInvalidate()
    }

    /// Sends `request` once.
    /// - Throws: ``AppleTransportError``.
    public func send(_ request: AppleHTTPRequest) async throws -> AppleHTTPResponse {
        var urlRequest = URLRequest(url: request.url, cachePolicy: .reloadIgnoringLocalCacheData, timeoutInterval: timeout)
        urlRequest.httpMethod = "POST"
        for (name, value) in request.headers {
            urlRequest.setValue(value, forHTTPHeaderField: name)
        }
        urlRequest.httpBody = request.body
        let data: Data
        let response: URLResponse
        do {
            (data, response) = try await session.data(for: urlRequest)
        } catch let error as URLError {
            if error.code == .timedOut { throw AppleTransportError.timeout }
            throw AppleTransportError.connectionFailed(Self.reason(error.code))
        } catch is CancellationError {
            throw CancellationError()
        } catch {
            throw AppleTransportError.connectionFailed("transport error")
        }
        guard let http = response as? HTTPURLResponse else {
            throw AppleTransportError.connectionFailed("not an HTTP response")
        }
        var headers: [String: String] = [:]
        for (name, value) in http.allHeaderFields {
            if let name = name as? String, let value = value as? String { headers[name] = value }
        }
        return AppleHTTPResponse(status: http.statusCode, headers: headers, body: data)
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
        case .cancelled: "cancelled"
        default: "URL error \(code.rawValue)"
        }
    }
}

/// Refuses every redirect, so the answer is the 3xx itself.
private final class RefuseRedirects: NSObject, URLSessionTaskDelegate, Sendable {
    func urlSession(
        _ session: URLSession,
        task: URLSessionTask,
        willPerformHTTPRedirection response: HTTPURLResponse,
        newRequest request: URLRequest,
        completionHandler: @escaping @Sendable (URLRequest?) -> Void
    ) {
        completionHandler(nil)
    }
}
