import Foundation

/// A temporary directory holding keys made by the `openssl` command, independently of the code under test.
public struct KeyDirectory: Sendable {
    /// The directory.
    public let url: URL

    /// Creates an empty directory under the temporary directory.
    public init() throws {
        url = FileManager.default.temporaryDirectory.appendingPathComponent("baton-keys-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
    }

    /// The path of `name` inside the directory.
    public func path(_ name: String) -> String { url.appendingPathComponent(name).path }

    /// Runs `openssl` with `arguments`; throws on a non-zero status.
    @discardableResult
    public func openssl(_ arguments: [String], input: Data? = nil) throws -> ProcessResult {
        let result = try runProcess("/usr/bin/openssl", arguments, input: input)
        guard result.status == 0 else { throw TestSupportError("openssl \(arguments.joined(separator: " ")) failed: \(result.stderr)") }
        return result
    }

    /// Writes a P-256 PKCS#8 key (an Apple `.p8`) to `name` and its public key to `name.pub`.
    public func p256(_ name: String) throws {
        try openssl(["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", path(name)])
        try openssl(["pkey", "-in", path(name), "-pubout", "-out", path("\(name).pub")])
    }

    /// A fresh P-256 key: its PKCS#8 PEM and the path of its public key PEM.
    public func p256() throws -> (privatePEM: String, publicPath: String) {
        let name = "\(UUID().uuidString).p8"
        try p256(name)
        return (try String(contentsOfFile: path(name), encoding: .utf8), path("\(name).pub"))
    }

    /// Writes `text` to `name` with permissions `mode`.
    public func write(_ name: String, _ text: String, mode: Int = 0o600) throws {
        try Data(text.utf8).write(to: url.appendingPathComponent(name))
        try FileManager.default.setAttributes([.posixPermissions: mode], ofItemAtPath: path(name))
    }

    /// Deletes the directory.
    public func remove() { try? FileManager.default.removeItem(at: url) }
}

/// Base64url without padding, decoded by the tests themselves (not by the code under test); nil when padded or invalid.
public func decodeBase64URL(_ text: some StringProtocol) -> Data? {
    var base64 = text.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
    guard !base64.contains("=") else { return nil }
    base64 += String(repeating: "=", count: (4 - base64.count % 4) % 4)
    return Data(base64Encoded: base64)
}

/// DER `ECDSA-Sig-Value` from a raw 64-byte `r||s` signature, as `openssl dgst -verify` wants.
public func derFromRaw(_ raw: Data) -> Data {
    func integer(_ bytes: Data) -> Data {
        var value = Data(bytes.drop(while: { $0 == 0 }))
        if value.isEmpty { value = Data([0]) }
        if value[value.startIndex] & 0x80 != 0 { value.insert(0, at: 0) }
        return Data([0x02, UInt8(value.count)]) + value
    }
    let body = integer(raw.prefix(32)) + integer(raw.suffix(32))
    return Data([0x30, UInt8(body.count)]) + body
}
