import Foundation

/// A blocking TCP connection to 127.0.0.1 for tests that need control URLSession does not give
/// (several requests on one connection, oversized heads, slow clients).
final class RawSocket {
    private var fd: Int32

    init(port: Int) throws {
        fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw RawSocketError.failed("socket") }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = UInt16(port).bigEndian
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let result = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard result == 0 else { close(fd); throw RawSocketError.failed("connect") }
        var timeout = timeval(tv_sec: 120, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
    }

    deinit { shutdown() }

    /// Closes the connection (idempotent).
    func shutdown() {
        if fd >= 0 { close(fd) }
        fd = -1
    }

    /// Whether bytes (or end of stream) arrive within `milliseconds`.
    func isReadable(within milliseconds: Int32) -> Bool {
        var entry = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
        return poll(&entry, 1, milliseconds) > 0
    }

    func send(_ text: String) throws {
        let bytes = Array(text.utf8)
        var sent = 0
        while sent < bytes.count {
            let n = bytes[sent...].withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            guard n > 0 else { throw RawSocketError.failed("send") }
            sent += n
        }
    }

    /// Reads one response (head plus `Content-Length` body); nil when the server closed the connection.
    func readResponse() throws -> (status: Int, head: String, body: String)? {
        var buffer: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 4096)
        func fill() throws -> Bool {
            let n = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if n == 0 || (n < 0 && errno == ECONNRESET) { return false }
            guard n > 0 else { throw RawSocketError.failed("recv") }
            buffer.append(contentsOf: chunk[..<n])
            return true
        }
        let separator: [UInt8] = Array("\r\n\r\n".utf8)
        var headEnd: Int?
        while headEnd == nil {
            if let range = buffer.firstRange(of: separator) { headEnd = range.upperBound; break }
            guard try fill() else { return nil }
        }
        let head = String(decoding: buffer[..<headEnd!], as: UTF8.self)
        let length = head.split(separator: "\r\n").first { $0.lowercased().hasPrefix("content-length:") }
            .flatMap { Int($0.split(separator: ":")[1].trimmingCharacters(in: .whitespaces)) } ?? 0
        while buffer.count < headEnd! + length {
            guard try fill() else { return nil }
        }
        let status = Int(head.split(separator: " ")[1]) ?? 0
        return (status, head, String(decoding: buffer[headEnd!..<(headEnd! + length)], as: UTF8.self))
    }

    /// Whether the server has closed the connection (reads until end of stream or timeout).
    func isClosedByServer() -> Bool {
        var byte: UInt8 = 0
        let n = recv(fd, &byte, 1, 0)
        return n == 0 || (n < 0 && errno == ECONNRESET)
    }
}

enum RawSocketError: Error { case failed(String) }
