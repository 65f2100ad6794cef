import BatonProcess
import Foundation
import Synchronization

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

/// A ``ChildProcess`` whose standard output and error are collected on background threads, so a chatty child
/// never blocks on a full pipe.
public final class RunningProcess: Sendable {
    private let child: ChildProcess
    private let finished = DispatchGroup()
    /// Standard output (0) and standard error (1), each set once its pipe reaches its end.
    private let collected = Mutex<[Int: Data]>([:])

    /// The child's process identifier.
    public var pid: pid_t { child.pid }

    init(_ executable: String, _ arguments: [String], input: Data?, environment: [String: String]?) throws {
        let environment = environment.map { ProcessInfo.processInfo.environment.merging($0) { _, new in new } }
        child = try ChildProcess(executable, arguments, environment: environment, standardInput: .pipe, standardOutput: .pipe, standardError: .pipe)
        for (index, handle) in [child.standardOutput, child.standardError].compactMap({ $0 }).enumerated() {
            finished.enter()
            Thread.detachNewThread { [self] in
                let data = handle.readDataToEndOfFile()
                collected.withLock { $0[index] = data }
                finished.leave()
            }
        }
        if let input { try? child.standardInput?.write(contentsOf: input) }
        try? child.standardInput?.close()
    }

    /// Sends `signal` to the child.
    public func signal(_ signal: Int32) {
        child.signal(signal)
    }

    /// Waits for the child to exit (killing it after `timeout`) and returns its status and output.
    /// A child killed by a signal reports 128 + the signal number.
    public func wait(timeout: TimeInterval = 120) throws -> ProcessResult {
        if finished.wait(timeout: .now() + timeout) == .timedOut {
            child.signal(SIGKILL)
            _ = child.waitForExit()
            throw TestSupportError("\(child.executable) did not finish within \(Int(timeout)) s")
        }
        let status = child.waitForExit()
        let output = collected.withLock { $0 }
        return ProcessResult(
            status: status,
            stdout: String(decoding: output[0] ?? Data(), as: UTF8.self),
            stderr: String(decoding: output[1] ?? Data(), as: UTF8.self)
        )
    }
}

/// A failure of the test scaffolding itself (not of the code under test).
public struct TestSupportError: Error, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}
