import Foundation

/// The package's root directory, found from this file's location.
public let packageRoot: URL = URL(fileURLWithPath: #filePath)
    .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

/// Path of the built `baton` executable (`BATON_BINARY` overrides it).
public var batonBinaryPath: String {
    if let path = ProcessInfo.processInfo.environment["BATON_BINARY"] { return path }
    return packageRoot.appendingPathComponent(".build/debug/baton").path
}

/// Path of the built `baton-bench` executable, the workbench: beside `baton`.
public var batonBenchBinaryPath: String {
    URL(fileURLWithPath: batonBinaryPath).deletingLastPathComponent().appendingPathComponent("baton-bench").path
}

/// Runs the built `baton` binary with `arguments` and returns its exit status and output.
public func runBaton(_ arguments: [String], input: Data? = nil, environment: [String: String]? = nil, timeout: TimeInterval = 120) throws -> ProcessResult {
    try runBuilt(batonBinaryPath, arguments, input: input, environment: environment, timeout: timeout)
}

/// Runs the built `baton-bench` binary (the benchmarks, the HTTP fuzzer) with `arguments`.
public func runBatonBench(_ arguments: [String], environment: [String: String]? = nil, timeout: TimeInterval = 120) throws -> ProcessResult {
    try runBuilt(batonBenchBinaryPath, arguments, input: nil, environment: environment, timeout: timeout)
}

/// Runs the executable the package built at `path`; a missing one says how to build it.
private func runBuilt(_ path: String, _ arguments: [String], input: Data?, environment: [String: String]?, timeout: TimeInterval) throws -> ProcessResult {
    guard FileManager.default.isExecutableFile(atPath: path) else {
        throw TestSupportError("\(URL(fileURLWithPath: path).lastPathComponent) binary missing at \(path): run 'swift build' first")
    }
    return try runProcess(path, arguments, input: input, environment: environment, timeout: timeout)
}

/// Runs the built binary on a Dispatch thread, so in-process servers keep Swift's cooperative threads.
public func runBatonOffPool(_ arguments: [String], environment: [String: String]? = nil) async throws -> ProcessResult {
    try await offPool { try runBaton(arguments, environment: environment) }
}

/// Applies Baton's schema to the database at `url` with `baton db migrate`.
public func migrateWithBaton(_ url: String) async throws {
    let result = try await runBatonOffPool(["db", "migrate", "--database-url", url])
    guard result.status == 0 else { throw TestSupportError("baton db migrate failed: \(result.stderr)") }
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
