import BatonAppleSignIn
import Foundation
import BatonJOSE
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// A tiny HTTP/1.1 server on 127.0.0.1 (port chosen by the kernel) answering canned responses by path,
/// one connection at a time on its own thread; just enough to test the fetcher's limits.
final class CannedHTTPServer: @unchecked Sendable {
    // @unchecked Sendable: `routes` is written before the thread starts and only read afterwards;
    // the listening socket is closed once, from `stop`.
    let port: UInt16
    private let socketDescriptor: Int32
    private let routes: [String: [UInt8]]

    init(routes: [String: [UInt8]]) throws {
        self.routes = routes
        let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        socketDescriptor = descriptor
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = 0
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(descriptor, $0, length) }
        }
        guard bound == 0, listen(descriptor, 16) == 0 else {
            close(descriptor)
            throw POSIXError(.EADDRINUSE)
        }
        _ = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(descriptor, $0, &length) }
        }
        port = UInt16(bigEndian: address.sin_port)
        let thread = Thread { [self] in serve() }
        thread.start()
    }

    func stop() {
        shutdown(socketDescriptor, Int32(SHUT_RDWR))
        close(socketDescriptor)
    }

    func url(_ path: String) -> URL { URL(string: "http://127.0.0.1:\(port)\(path)")! }

    private func serve() {
        while true {
            let client = accept(socketDescriptor, nil, nil)
            guard client >= 0 else { return }
            var request = [UInt8]()
            var buffer = [UInt8](repeating: 0, count: 4096)
            while !request.ends(with: Array("\r\n\r\n".utf8)) {
                let count = read(client, &buffer, buffer.count)
                guard count > 0 else { break }
                request += buffer.prefix(count)
            }
            let line = String(decoding: request.prefix { $0 != 0x0D }, as: UTF8.self).split(separator: " ")
            let path = line.count > 1 ? String(line[1]) : "/"
            let response = routes[path] ?? Array("HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".utf8)
            if path == "/slow" { Thread.sleep(forTimeInterval: 3) }
            var offset = 0
            while offset < response.count {
                let written = response[offset...].withUnsafeBytes { send(client, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
                guard written > 0 else { break }
                offset += written
            }
            close(client)
        }
    }
}

private extension Array where Element == UInt8 {
    func ends(with suffix: [UInt8]) -> Bool { count >= suffix.count && Array(self[(count - suffix.count)...]) == suffix }
}

private func response(status: String, body: [UInt8], headers: String = "") -> [UInt8] {
    Array("HTTP/1.1 \(status)\r\nContent-Type: application/json\r\nContent-Length: \(body.count)\r\n\(headers)Connection: close\r\n\r\n".utf8) + body
}

@Suite("Key-set fetcher over loopback HTTP")
struct KeySetFetcherTests {
    static let document = JSON.serializeBytes(Fixture.keySet.json())

    static func server() throws -> CannedHTTPServer {
        try CannedHTTPServer(routes: [
            "/auth/keys": response(status: "200 OK", body: document),
            "/redirect": response(status: "302 Found", body: [], headers: "Location: /auth/keys\r\n"),
            "/error": response(status: "500 Internal Server Error", body: Array("{}".utf8)),
            "/accepted": response(status: "203 Non-Authoritative Information", body: document),
            "/huge": response(status: "200 OK", body: [UInt8](repeating: 0x20, count: 70_000)),
            "/slow": response(status: "200 OK", body: document),
        ])
    }

    @Test("HTTP 200 with a key set is fetched and used by the cache")
    func fetches() async throws {
        let server = try Self.server()
        defer { server.stop() }
        let fetched = try await HTTPKeySetFetcher(url: server.url("/auth/keys")).fetchKeySet()
        #expect(fetched == Self.document)
        let cache = KeySetCache(url: server.url("/auth/keys"), now: { Date(timeIntervalSince1970: Fixture.now) })
        let verifier = IdentityTokenVerifier(clientIDs: [Fixture.clientID], keys: cache, now: { Date(timeIntervalSince1970: Fixture.now) })
        #expect(try await verifier.verify(Fixture.token()).keyID == Fixture.kids[0])
        #expect(cache.fetchCount == 1)
    }

    @Test("Redirects, other statuses, oversize bodies and slow servers are refused, each saying why",
          arguments: [("/redirect", "redirect refused (HTTP 302)"), ("/error", "HTTP 500, expected 200"), ("/accepted", "HTTP 203, expected 200"),
                      ("/huge", "fetch failed: answer larger than 65536 bytes"), ("/slow", "fetch failed: timed out"), ("/missing", "HTTP 404, expected 200")])
    func refuses(path: String, reason: String) async throws {
        let server = try Self.server()
        defer { server.stop() }
        let error = await #expect(throws: HTTPKeySetFetcher.FetchError.self) {
            try await HTTPKeySetFetcher(url: server.url(path), timeout: 1).fetchKeySet()
        }
        #expect(error?.description == reason)
    }
}
