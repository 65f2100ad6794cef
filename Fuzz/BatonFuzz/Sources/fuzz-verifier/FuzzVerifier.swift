import Foundation
import FuzzSupport

/// The harness, built once on first use (keys, key set, seed tokens).
private let harness: VerifierHarness = {
    do {
        return try VerifierHarness()
    } catch {
        FileHandle.standardError.write(Data("fuzz-verifier: cannot set up the harness: \(error)\n".utf8))
        exit(1)
    }
}()

/// libFuzzer entry point: one input for the identity-token verifier (see ``VerifierHarness``).
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzVerifier(_ data: UnsafePointer<UInt8>, _ count: Int) -> CInt {
    writeSeedsIfAsked({ harness.seeds }, companions: { [("verifier-keys.json", harness.keySetDocument)] })
    harness.run(UnsafeRawBufferPointer(start: data, count: count))
    return 0
}
