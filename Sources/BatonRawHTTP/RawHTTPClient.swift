import Foundation

/// A raw HTTP exchange over one fresh loopback connection, for `baton-bench fuzz http`: it writes bytes exactly
/// as given (broken or not) and reads whatever comes back. Blocking: runs on the fuzzer's own threads,
/// never on Swift's cooperative pool.
package struct RawExchange: Sendable {
    /// One piece of a request: bytes to write, then an optional pause (slow clients).
    package struct Piece: Sendable {
        package var bytes: [UInt8]
        package var pauseMilliseconds: Int = 0

        package init(bytes: [UInt8], pauseMilliseconds: Int = 0) {
            self.bytes = bytes
            self.pauseMilliseconds = pauseMilliseconds
        }
    }

    /// The server's loopback address.
    package let address: LoopbackAddress

    package init(address: LoopbackAddress) { self.address = address }

    /// Connects, writes `pieces`, reads up to `responses` responses (each within `timeoutMilliseconds`)
    /// and closes. A write error (the server closed early) is not a failure: reading reports what came back.
    package func exchange(_ pieces: [Piece], responses: Int = 1, timeoutMilliseconds: Int) -> [RawHTTPConnection.Outcome] {
        let connection: RawHTTPConnection
        switch RawHTTPConnection.open(address, timeoutMilliseconds: timeoutMilliseconds) {
        case .success(let open): connection = open
        case .failure(let failure): return [.connectFailed(failure.code)]
        }
        for piece in pieces {
            guard connection.write(piece.bytes) else { break }
            if piece.pauseMilliseconds > 0 { usleep(UInt32(piece.pauseMilliseconds * 1000)) }
        }
        var outcomes: [RawHTTPConnection.Outcome] = []
        for _ in 0..<responses {
            let outcome = connection.readResponse()
            outcomes.append(outcome)
            guard case .response = outcome, !connection.announcedClose else { break }
        }
        return outcomes
    }
}

/// The only raw-socket HTTP/1.1 client of the package, for tools and tests: the fuzzer, the load generator and
/// the HTTP server's tests. One blocking TCP connection to a loopback address that writes bytes exactly as given
/// and reads `Content-Length` responses (or, without one, everything up to the close). Never used to talk to
/// Apple; callers keep it off Swift's cooperative pool.
package final class RawHTTPConnection {
    /// What came back for one response.
    package enum Outcome: Equatable, Sendable {
        /// A complete response (status line, headers, and the body its `Content-Length` announced).
        case response(status: Int, body: [UInt8])
        /// The server closed the connection without a complete response (or after one that announced
        /// `Connection: close`, where closing is its right).
        case closed
        /// Nothing complete arrived before the read timeout.
        case timedOut
        /// The connection could not be made: the server is down or refusing connections.
        case connectFailed(Int32)
    }

    /// A failed `socket` or `connect`, with its errno: kept because the workbench's clients count and print that errno as
    /// an outcome of their own (`connectFailed`), which a code and a reason would flatten.
    package struct ConnectError: Error {
        package let code: Int32
    }

    private var descriptor: Int32
    private var buffer: [UInt8] = []
    /// What one `recv` reads into, kept from read to read.
    private var chunk = [UInt8](repeating: 0, count: 16_384)
    private var closed = false
    /// Whether the last response carried `Connection: close`.
    package private(set) var announcedClose = false

    private init(descriptor: Int32) { self.descriptor = descriptor }

    /// Connects to `address`; reads and writes give up after `timeoutMilliseconds`.
    package static func open(_ address: LoopbackAddress, timeoutMilliseconds: Int) -> Result<RawHTTPConnection, ConnectError> {
        let descriptor = socket(address.family, Int32(SOCK_STREAM.rawValue), 0)
        guard descriptor >= 0 else { return .failure(ConnectError(code: errno)) }
        var timeout = timeval(tv_sec: timeoutMilliseconds / 1000, tv_usec: Int((timeoutMilliseconds % 1000) * 1000))
        setsockopt(descriptor, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        setsockopt(descriptor, SOL_SOCKET, SO_SNDTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        var noDelay: Int32 = 1
        setsockopt(descriptor, Int32(IPPROTO_TCP), TCP_NODELAY, &noDelay, socklen_t(MemoryLayout<Int32>.size))
        guard address.connect(descriptor) else {
            let code = errno
            close(descriptor)
            return .failure(ConnectError(code: code))
        }
        return .success(RawHTTPConnection(descriptor: descriptor))
    }

    /// Connects to `127.0.0.1:port` (tests); throws ``ConnectError`` when nothing listens.
    package static func open(port: Int, timeoutMilliseconds: Int = 120_000) throws -> RawHTTPConnection {
        guard let address = LoopbackAddress(url: URL(string: "http://127.0.0.1:\(port)")!) else { throw ConnectError(code: EINVAL) }
        return try open(address, timeoutMilliseconds: timeoutMilliseconds).get()
    }

    deinit { shutdown() }

    /// Closes the connection (idempotent).
    package func shutdown() {
        if descriptor >= 0 { close(descriptor) }
        descriptor = -1
    }

    /// Writes all of `bytes`; false once the server stopped reading or closed.
    @discardableResult
    package func write(_ bytes: [UInt8]) -> Bool {
        var offset = 0
        while offset < bytes.count {
            let written = bytes[offset...].withUnsafeBytes { Glibc.send(descriptor, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            if written <= 0 { return false }
            offset += written
        }
        return true
    }

    /// Writes `text` as UTF-8; throws when the server stopped reading or closed.
    package func send(_ text: String) throws {
        guard write(Array(text.utf8)) else { throw ConnectError(code: errno) }
    }

    /// Reads the next response.
    package func readResponse() -> Outcome {
        while true {
            if let (outcome, consumed, close) = parse() {
                buffer.removeFirst(consumed)
                announcedClose = close
                return outcome
            }
            if closed { return .closed }
            guard fill() else { return closed ? (parseUntilClose() ?? .closed) : .timedOut }
        }
    }

    /// Whether bytes (or the end of the stream) arrive within `milliseconds`.
    package func isReadable(within milliseconds: Int32) -> Bool {
        var entry = pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0)
        return poll(&entry, 1, milliseconds) > 0
    }

    /// Whether the server has closed the connection (reads until the end of the stream or the timeout).
    package func isClosedByServer() -> Bool {
        var byte: UInt8 = 0
        let count = recv(descriptor, &byte, 1, 0)
        return count == 0 || (count < 0 && errno == ECONNRESET)
    }

    /// Reads more bytes; false on timeout or close.
    private func fill() -> Bool {
        let descriptor = descriptor
        let count = chunk.withUnsafeMutableBytes { recv(descriptor, $0.baseAddress, $0.count, 0) }
        if count > 0 {
            buffer.append(contentsOf: chunk[0..<count])
            return true
        }
        if count == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) { closed = true }
        return false
    }

    /// A complete response at the start of the buffer and the bytes it used, if there is one.
    private func parse() -> (RawHTTPConnection.Outcome, Int, Bool)? {
        guard let headEnd = headEnd() else { return nil }
        guard let (status, headers) = Self.head(buffer[0..<headEnd]) else { return (.closed, buffer.count, true) }
        guard let lengthText = headers["content-length"] else { return nil }
        guard let length = Int(lengthText), length >= 0 else { return (.closed, buffer.count, true) }
        let bodyStart = headEnd + 4
        guard buffer.count >= bodyStart + length else { return nil }
        let close = headers["connection"]?.lowercased() == "close"
        return (.response(status: status, body: Array(buffer[bodyStart..<(bodyStart + length)])), bodyStart + length, close)
    }

    /// A response without `Content-Length` whose body ends at the close.
    private func parseUntilClose() -> RawHTTPConnection.Outcome? {
        guard let headEnd = headEnd(), let (status, _) = Self.head(buffer[0..<headEnd]) else { return nil }
        return .response(status: status, body: Array(buffer[(headEnd + 4)...]))
    }

    private func headEnd() -> Int? {
        guard buffer.count >= 4 else { return nil }
        for index in 0...(buffer.count - 4)
        where buffer[index] == 13 && buffer[index + 1] == 10 && buffer[index + 2] == 13 && buffer[index + 3] == 10 {
            return index
        }
        return nil
    }

    /// The status and the headers (names lower-cased, values without surrounding spaces and tabs) of a response
    /// head, or nil when its status line is not `HTTP/1.x NNN`. Reads bytes: Foundation's string splitting and
    /// trimming were a visible share of a rehearsal's CPU at a few million responses.
    private static func head(_ bytes: ArraySlice<UInt8>) -> (Int, [String: String])? {
        var lines: [ArraySlice<UInt8>] = []
        var start = bytes.startIndex
        var index = bytes.startIndex
        while index < bytes.endIndex {
            if bytes[index] == 13, index + 1 < bytes.endIndex, bytes[index + 1] == 10 {
                lines.append(bytes[start..<index])
                index += 2
                start = index
            } else {
                index += 1
            }
        }
        lines.append(bytes[start..<bytes.endIndex])
        let statusLine = lines[0].split(separator: UInt8(ascii: " "), maxSplits: 2, omittingEmptySubsequences: true)
        guard statusLine.count >= 2, statusLine[0].starts(with: "HTTP/1.".utf8), statusLine[1].count <= 3,
              statusLine[1].allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }),
              let status = Int(String(decoding: statusLine[1], as: UTF8.self)), (100...599).contains(status) else {
            return nil
        }
        func isBlank(_ byte: UInt8) -> Bool { byte == UInt8(ascii: " ") || byte == UInt8(ascii: "\t") }
        var headers: [String: String] = [:]
        for line in lines.dropFirst() {
            guard let colon = line.firstIndex(of: UInt8(ascii: ":")) else { continue }
            let name = line[..<colon].map { $0 >= UInt8(ascii: "A") && $0 <= UInt8(ascii: "Z") ? $0 + 32 : $0 }
            var value = line[(colon + 1)...]
            while let first = value.first, isBlank(first) { value = value.dropFirst() }
            while let last = value.last, isBlank(last) { value = value.dropLast() }
            headers[String(decoding: name, as: UTF8.self)] = String(decoding: value, as: UTF8.self)
        }
        return (status, headers)
    }
}

/// A numeric loopback address and port; anything else is refused, so the fuzzer never leaves the machine.
package struct LoopbackAddress: Sendable {
    package let family: Int32
    private let v4: sockaddr_in
    private let v6: sockaddr_in6

    /// Reads `http://HOST:PORT` with HOST `127.x.x.x`, `localhost` or `[::1]`; nil for anything else.
    package init?(url: URL) {
        guard url.scheme == "http", let rawHost = url.host, let port = url.port, (1...65535).contains(port) else { return nil }
        let host = rawHost == "localhost" ? "127.0.0.1" : rawHost.trimmingCharacters(in: CharacterSet(charactersIn: "[]"))
        var v4 = sockaddr_in(), v6 = sockaddr_in6()
        if inet_pton(AF_INET, host, &v4.sin_addr) == 1, host.hasPrefix("127.") {
            v4.sin_family = sa_family_t(AF_INET)
            v4.sin_port = UInt16(port).bigEndian
            family = AF_INET
        } else if inet_pton(AF_INET6, host, &v6.sin6_addr) == 1, host == "::1" {
            v6.sin6_family = sa_family_t(AF_INET6)
            v6.sin6_port = UInt16(port).bigEndian
            family = AF_INET6
        } else {
            return nil
        }
        self.v4 = v4
        self.v6 = v6
    }

    /// Connects `descriptor`; false on failure (errno set).
    package func connect(_ descriptor: Int32) -> Bool {
        if family == AF_INET {
            var address = v4
            return withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(descriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0 }
            }
        }
        var address = v6
        return withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(descriptor, $0, socklen_t(MemoryLayout<sockaddr_in6>.size)) == 0 }
        }
    }
}
