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

/// A child process started with `posix_spawn`, whose output is collected on background threads so a
/// chatty child never blocks on a full pipe. (Foundation's `Process.waitUntilExit` can hang on Linux
/// when several processes finish at once, so this waits with `waitpid`.)
public final class RunningProcess: @unchecked Sendable {
    // `@unchecked Sendable`: `pid` and `executable` are immutable; output is guarded by the
    // collector's lock; `status` is written once by the thread that reaps the child.
    /// The child's process identifier.
    public let pid: pid_t
    private let executable: String
    private let group = DispatchGroup()
    private let collected = OutputCollector()

    init(_ executable: String, _ arguments: [String], input: Data?, environment: [String: String]?) throws {
        self.executable = executable
        var environmentValues = ProcessInfo.processInfo.environment
        if let environment { environmentValues.merge(environment) { _, new in new } }
        var inPipe: [Int32] = [0, 0], outPipe: [Int32] = [0, 0], errPipe: [Int32] = [0, 0]
        guard pipe(&inPipe) == 0, pipe(&outPipe) == 0, pipe(&errPipe) == 0 else {
            throw TestSupportError("pipe() failed")
        }
        // Close-on-exec, so children spawned at the same time by other tests do not inherit (and hold
        // open) these pipes; dup2 in the file actions clears the flag on the child's 0, 1 and 2.
        for fd in inPipe + outPipe + errPipe { _ = fcntl(fd, F_SETFD, FD_CLOEXEC) }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_adddup2(&actions, inPipe[0], 0)
        posix_spawn_file_actions_adddup2(&actions, outPipe[1], 1)
        posix_spawn_file_actions_adddup2(&actions, errPipe[1], 2)
        for fd in inPipe + outPipe + errPipe { posix_spawn_file_actions_addclose(&actions, fd) }
        let argv = ([executable] + arguments).map { strdup($0) } + [nil]
        let envp = environmentValues.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer { (argv + envp).forEach { free($0) } }
        var child: pid_t = 0
        let spawned = posix_spawn(&child, executable, &actions, nil, argv, envp)
        close(inPipe[0]); close(outPipe[1]); close(errPipe[1])
        guard spawned == 0 else {
            close(inPipe[1]); close(outPipe[0]); close(errPipe[0])
            throw TestSupportError("could not start \(executable): error \(spawned)")
        }
        pid = child
        for (index, fd) in [outPipe[0], errPipe[0]].enumerated() {
            group.enter()
            let collected = collected, group = group
            Thread.detachNewThread {
                let handle = FileHandle(fileDescriptor: fd, closeOnDealloc: true)
                collected.set(index, handle.readDataToEndOfFile())
                group.leave()
            }
        }
        let writer = FileHandle(fileDescriptor: inPipe[1], closeOnDealloc: true)
        if let input { try? writer.write(contentsOf: input) }
        try? writer.close()
    }

    /// Sends `signal` to the child.
    public func signal(_ signal: Int32) {
        kill(pid, signal)
    }

    /// Waits for the child to exit (killing it after `timeout`) and returns its status and output.
    /// A child killed by a signal reports 128 + the signal number.
    public func wait(timeout: TimeInterval = 120) throws -> ProcessResult {
        if group.wait(timeout: .now() + timeout) == .timedOut {
            kill(pid, SIGKILL)
            var ignored: Int32 = 0
            waitpid(pid, &ignored, 0)
            throw TestSupportError("\(executable) did not finish within \(Int(timeout)) s")
        }
        var status: Int32 = 0
        while waitpid(pid, &status, 0) == -1 && errno == EINTR {}
        let signal = status & 0x7F
        return ProcessResult(
            status: signal == 0 ? (status >> 8) & 0xFF : 128 + signal,
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
