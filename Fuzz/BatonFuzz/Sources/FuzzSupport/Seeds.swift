import Foundation

/// A named input of a seed corpus.
public typealias Seed = (name: String, bytes: [UInt8])

/// When the environment names a directory in `BATON_FUZZ_WRITE_SEEDS`, writes the target's seed corpus
/// there (one file per seed, named after it) and `companions` into the directory's parent, then exits;
/// `scripts/fuzz.sh seeds` uses it to regenerate `Fuzz/corpus/`.
///
/// Exits with `_exit`, which libFuzzer does not report as a crash.
public func writeSeedsIfAsked(_ seeds: () throws -> [Seed], companions: () -> [Seed] = { [] }) {
    guard let directory = ProcessInfo.processInfo.environment["BATON_FUZZ_WRITE_SEEDS"] else { return }
    do {
        let folder = URL(fileURLWithPath: directory)
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        for seed in try seeds() { try Data(seed.bytes).write(to: folder.appendingPathComponent(seed.name)) }
        for file in companions() { try Data(file.bytes).write(to: folder.deletingLastPathComponent().appendingPathComponent(file.name)) }
        _exit(0)
    } catch {
        FileHandle.standardError.write(Data("cannot write seeds: \(error)\n".utf8))
        _exit(1)
    }
}
