import Foundation
import BatonJOSE

/// Reads a file of `Tests/Vectors` (found from this file's location).
func vectorData(_ name: String) throws -> Data {
    let url = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("Vectors").appendingPathComponent(name)
    return try Data(contentsOf: url)
}

/// Bytes from a hexadecimal string.
func hexBytes(_ hex: String) -> [UInt8] {
    var bytes: [UInt8] = []
    var iterator = hex.utf8.makeIterator()
    while let high = iterator.next(), let low = iterator.next() {
        bytes.append(UInt8(String(decoding: [high, low], as: UTF8.self), radix: 16)!)
    }
    return bytes
}

/// The code of the `JOSEError` that `body` throws, or `nil` if it throws nothing (or another error).
func joseCode(_ body: () throws -> Void) -> JOSEError.Code? {
    do {
        try body()
        return nil
    } catch let error as JOSEError {
        return error.code
    } catch {
        return nil
    }
}
