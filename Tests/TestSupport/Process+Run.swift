import Foundation

/// What a finished child process left behind.
public struct ProcessResult: Sendable {
    public var status: Int32
    public var stdout: String
    public var stderr: String
}

/// Runs `executable` with `arguments`, feeding `input` to standard input, and waits for it.
public func runProcess(
    _ executable: String,
    _ arguments: [String],
    input: Data? = nil,
    environment: [String: String]? = nil,
    timeout: TimeInterval = 120
) throws -> ProcessResult {
    try runProcessAsync(executable, arguments, input: input, environment: environment).wait(timeout: timeout)
}

/// Starts `executable` and returns at once; ``RunningProcess/wait(timeout:)`` collects its result.
public func runProcessAsync(
    _ executable: String,
    _ arguments: [String],
    input: Data? = nil,
    environment: [String: String]? = nil
) throws -> RunningProcess {
    try RunningProcess(executable, arguments, input: input, environment: environment)
}

/// A child process whose output is collected on background threads, so a chatty child never blocks
/// on a full pipe.
public final class RunningProcess: @unchecked Sendable {
    // `@unchecked Sendable`: `process` is only started in init and then read; output is guarded by
    // `collected`'s lock.
    public let process: Process
    private let group = DispatchGroup()
    private let collected = OutputCollector()

    init(_ executable: String, _ arguments: [String], input: Data?, environment: [String: String]?) throws {
        process = Process()
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
        for (index, pipe) in [outPipe, errPipe].enumerated() {
            group.enter()
            let collected = collected, group = group
            DispatchQueue.global().async {
                let data = pipe.fileHandleForReading.readDataToEndOfFile()
                collected.set(index, data)
                group.leave()
            }
        }
        if let input { inPipe.fileHandleForWriting.write(input) }
        try? inPipe.fileHandleForWriting.close()
    }

    /// The child's process identifier.
    public var pid: Int32 { process.processIdentifier }

    /// Sends `signal` to the child.
    public func signal(_ signal: Int32) {
        kill(process.processIdentifier, signal)
    }

    /// Waits for the child to exit (killing it after `timeout`) and returns its status and output.
    public func wait(timeout: TimeInterval = 120) throws -> ProcessResult {
        if group.wait(timeout: .now() + timeout) == .timedOut {
            process.terminate()
            throw TestSupportError("\(process.executableURL?.path ?? "process") did not finish within \(Int(timeout)) s")
        }
        process.waitUntilExit()
        return ProcessResult(
            status: process.terminationStatus,
            stdout: String(decoding: collected.get(0), as: UTF8.self),
            stderr: String(decoding: collected.get(1), as: UTF8.self)
        )
    }
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
