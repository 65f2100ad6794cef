import BatonConcurrency
import Foundation
import Synchronization

/// A program run as a child process: started with `posix_spawn` and reaped with `waitpid` (Foundation's
/// `Process.waitUntilExit` can hang on Linux when several children end at once). The one way the tools
/// (benchmarks, the rehearsal's throwaway cluster) and the tests run a program.
///
/// The child starts with a clean signal state (nothing blocked, every handler the default: a thread of the
/// parent may block a signal the child needs, such as pgbench's SIGALRM). Each standard stream goes where
/// ``Stream`` says; the parent's ends of pipes are close-on-exec, so children started meanwhile do not
/// inherit them. Reads and ``waitForExit()`` block: call them off Swift's cooperative pool (``exitStatus()``
/// waits there).
public final class ChildProcess: Sendable {
    /// Where one of the child's standard streams goes.
    public enum Stream: Sendable, Equatable {
        /// The parent's own.
        case inherit
        /// `/dev/null`.
        case discard
        /// A pipe, whose other end the parent holds (``standardInput``, ``standardOutput``, ``standardError``).
        case pipe
        /// A file: read for standard input; for output, created or truncated, mode 0600.
        case file(String)
        /// Standard error only: wherever standard output goes.
        case standardOutput
    }

    /// Why a child could not be started. Kept in this module, below every `CodedError` user: one line (a failed `pipe`
    /// or `posix_spawn`) that no caller matches on.
    public struct StartError: Error, CustomStringConvertible {
        /// `cannot start /usr/bin/psql: No such file or directory`.
        public let description: String
    }

    /// The child's process ID.
    public let pid: pid_t
    /// The program's path.
    public let executable: String
    /// The parent's end of the child's standard input, when it is a ``Stream/pipe``.
    public let standardInput: FileHandle?
    /// The parent's end of the child's standard output, when it is a ``Stream/pipe``.
    public let standardOutput: FileHandle?
    /// The parent's end of the child's standard error, when it is a ``Stream/pipe``.
    public let standardError: FileHandle?
    /// The exit status, once the child is reaped (its process ID may then belong to another process).
    private let reaped = Mutex<Int32?>(nil)

    /// Starts `executable` with `arguments`.
    /// - Parameters:
    ///   - executable: the program's path (`PATH` is not searched: run `/usr/bin/env` for that).
    ///   - environment: the child's whole environment; nil (the default) passes the parent's.
    ///   - standardInput: default `/dev/null`.
    ///   - standardOutput, standardError: default the parent's.
    /// - Throws: ``StartError`` when a pipe cannot be made or the program cannot be started.
    public init(_ executable: String, _ arguments: [String], environment: [String: String]? = nil,
                standardInput: Stream = .discard, standardOutput: Stream = .inherit, standardError: Stream = .inherit) throws(StartError) {
        precondition(standardInput != .standardOutput && standardOutput != .standardOutput, "only standard error can follow standard output")
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        var parentEnds: [Int32: Int32] = [:], childEnds: [Int32] = []
        for (fd, stream) in [(Int32(0), standardInput), (1, standardOutput), (2, standardError)] {
            switch stream {
            case .inherit:
                break
            case .discard:
                posix_spawn_file_actions_addopen(&actions, fd, "/dev/null", fd == 0 ? O_RDONLY : O_WRONLY, 0)
            case .file(let path):
                posix_spawn_file_actions_addopen(&actions, fd, path, fd == 0 ? O_RDONLY : O_WRONLY | O_CREAT | O_TRUNC, 0o600)
            case .standardOutput:
                posix_spawn_file_actions_adddup2(&actions, 1, fd)
            case .pipe:
                var ends: [Int32] = [0, 0]
                guard pipe(&ends) == 0 else {
                    for end in Array(parentEnds.values) + childEnds { close(end) }
                    throw StartError(description: "cannot start \(executable): pipe() failed")
                }
                for end in ends { _ = fcntl(end, F_SETFD, FD_CLOEXEC) }
                let (childEnd, parentEnd) = fd == 0 ? (ends[0], ends[1]) : (ends[1], ends[0])
                // dup2 clears close-on-exec on the child's copy only.
                posix_spawn_file_actions_adddup2(&actions, childEnd, fd)
                childEnds.append(childEnd)
                parentEnds[fd] = parentEnd
            }
        }
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        var noSignals = sigset_t(), allSignals = sigset_t()
        sigemptyset(&noSignals)
        sigfillset(&allSignals)
        posix_spawnattr_setsigmask(&attributes, &noSignals)
        posix_spawnattr_setsigdefault(&attributes, &allSignals)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF))

        let argv = ([executable] + arguments).map { strdup($0) } + [nil]
        let envp = environment.map { $0.map { strdup("\($0.key)=\($0.value)") } + [nil] }
        defer { (argv + (envp ?? [])).forEach { free($0) } }
        var child: pid_t = 0
        let spawned = if let envp {
            posix_spawn(&child, executable, &actions, &attributes, argv, envp)
        } else {
            posix_spawn(&child, executable, &actions, &attributes, argv, environ)
        }
        childEnds.forEach { close($0) }
        guard spawned == 0 else {
            parentEnds.values.forEach { close($0) }
            throw StartError(description: "cannot start \(executable): \(String(cString: strerror(spawned)))")
        }
        self.pid = child
        self.executable = executable
        let handle = { (fd: Int32) in parentEnds[fd].map { FileHandle(fileDescriptor: $0, closeOnDealloc: true) } }
        self.standardInput = handle(0)
        self.standardOutput = handle(1)
        self.standardError = handle(2)
    }

    /// Reads standard output (a ``Stream/pipe``) up to the next newline, or its end; the line without the newline.
    /// Reads a byte at a time, so nothing after the line is consumed. Blocks.
    public func readLine() -> String {
        guard let output = standardOutput else { preconditionFailure("standard output is not a pipe") }
        var bytes: [UInt8] = []
        var byte: UInt8 = 0
        while read(output.fileDescriptor, &byte, 1) == 1, byte != UInt8(ascii: "\n") {
            bytes.append(byte)
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    /// Reads standard output (a ``Stream/pipe``) to its end. Blocks.
    public func readToEnd() -> Data {
        guard let output = standardOutput else { preconditionFailure("standard output is not a pipe") }
        return output.readDataToEndOfFile()
    }

    /// Sends `signal`, unless the child has been reaped.
    public func signal(_ signal: Int32) {
        reaped.withLock { status in
            if status == nil { kill(pid, signal) }
        }
    }

    /// Waits for the child to end and returns its exit status, or 128 + the signal that ended it (as a shell
    /// reports it); later calls return the same. Blocks.
    ///
    /// The child is waited for without being reaped, then reaped under the lock ``signal(_:)`` takes, so a
    /// signal never reaches another process that got the ID.
    public func waitForExit() -> Int32 {
        if let status = reaped.withLock({ $0 }) { return status }
        var info = siginfo_t()
        while waitid(P_PID, id_t(pid), &info, WEXITED | WNOWAIT) == -1 && errno == EINTR {}
        return reaped.withLock { reaped in
            if let status = reaped { return status }
            var raw: Int32 = 0
            let status: Int32
            if waitpid(pid, &raw, 0) == pid {
                let signal = raw & 0x7F
                status = signal == 0 ? (raw >> 8) & 0xFF : 128 + signal
            } else {
                status = -1
            }
            reaped = status
            return status
        }
    }

    /// ``waitForExit()`` on a Dispatch thread, never on the cooperative pool.
    public func exitStatus() async -> Int32 {
        await offPool { self.waitForExit() }
    }
}
