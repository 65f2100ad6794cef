import Foundation

/// What a finished child process left behind.
public struct ProcessResult: Sendable {
    public var status: Int32
    public var stdout: String
    public var stderr: String
}

/// Runs `executable` with `arguments`, feeding `input` to standard input, and waits for it.
///
/// Output is collected on background threads so a chatty child never blocks on a full pipe.
public func runProcess(
    _ executable: String,
    _ arguments: [String],
    input: Data? = nil,
    environment: [String: String]? = nil,
    timeout: TimeInterval = 120
) throws -> ProcessResult {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: executable)
    process.arguments = arguments
    if let environment {
        process.environment = ProcessInfo.processInfo.environment.merging(environment) { _, new in new }
    }
    let outPipe = Pipe(), errPipe = Pipe(), inPipe = Pipe()
    process.standardOutput = outPipe
    process.standardError = errPipe
    process.standardInput = inPipe
    try process.run()
    let collected = OutputCollector()
    let group = DispatchGroup()
    for (index, pipe) in [outPipe, errPipe].enumerated() {
        group.enter()
        DispatchQueue.global().async {
            let data = pipe.fileHandleForReading.readDataToEndOfFile()
            collected.set(index, data)
            group.leave()
        }
    }
    if let input { inPipe.fileHandleForWriting.write(input) }
    try? inPipe.fileHandleForWriting.close()
    if group.wait(timeout: .now() + timeout) == .timedOut {
        process.terminate()
        throw TestSupportError("\(executable) did not finish within \(Int(timeout)) s")
    }
    process.waitUntilExit()
    return ProcessResult(
        status: process.terminationStatus,
        stdout: String(decoding: collected.get(0), as: UTF8.self),
        stderr: String(decoding: collected.get(1), as: UTF8.self)
    )
}

/// A failure of the test scaffolding itself (not of the code under test).
public struct TestSupportError: Error, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}

private final class OutputCollector: @unchecked Sendable {
    // Guarded by `lock`; written once per slot from the reader threads.
    private let lock = NSLock()
    private var data: [Int: Data] = [:]
    func set(_ index: Int, _ value: Data) { lock.withLock { data[index] = value } }
    func get(_ index: Int) -> Data { lock.withLock { data[index] ?? Data() } }
}
