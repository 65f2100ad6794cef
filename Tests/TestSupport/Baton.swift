import Foundation

/// The package's root directory, found from this file's location.
public let packageRoot: URL = URL(fileURLWithPath: #filePath)
    .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

/// Path of the built `baton` executable (`BATON_BINARY` overrides it).
public var batonBinaryPath: String {
    if let path = ProcessInfo.processInfo.environment["BATON_BINARY"] { return path }
    return packageRoot.appendingPathComponent(".build/debug/baton").path
}

/// Runs the built `baton` binary with `arguments` and returns its exit status and output.
public func runBaton(_ arguments: [String], input: Data? = nil, environment: [String: String]? = nil, timeout: TimeInterval = 120) throws -> ProcessResult {
    guard FileManager.default.isExecutableFile(atPath: batonBinaryPath) else {
        throw TestSupportError("baton binary missing at \(batonBinaryPath): run 'swift build' first")
    }
    return try runProcess(batonBinaryPath, arguments, input: input, environment: environment, timeout: timeout)
}

/// The path of a file in `../shared/vectors` (beside the work tree) or `Tests/Vectors`.
public func vectorPath(_ name: String) throws -> String {
    let candidates = [
        packageRoot.appendingPathComponent("Tests/Vectors/\(name)").path,
        packageRoot.deletingLastPathComponent().appendingPathComponent("shared/vectors/\(name)").path,
    ]
    guard let path = candidates.first(where: { FileManager.default.fileExists(atPath: $0) }) else {
        throw TestSupportError("test vector \(name) not found in \(candidates)")
    }
    return path
}
