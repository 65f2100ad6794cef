import Foundation
import TestSupport
import Testing

/// An application that embeds Baton (Examples/EmbedderCheck) has modules of its own named `Logging`, `JSON`, `JOSE`,
/// `Postgres`, `HTTPServer` and `AppleSignIn`; SwiftPM refuses a package graph where two modules share a
/// name, so the example builds only while Baton's modules keep names of their own.
@Suite("An embedder's package graph")
struct EmbedderPackageTests {
    @Test("an embedder with its own Logging, JSON, JOSE, Postgres, HTTPServer and AppleSignIn modules builds beside the Baton product")
    func embedderBuilds() async throws {
        // The example's build (Baton's library modules and the example's target only) in a scratch directory
        // removed afterwards; the manifest cache goes there too.
        let scratch = FileManager.default.temporaryDirectory.appendingPathComponent("baton-embedder-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: scratch) }
        let arguments = [
            "swift", "build", "--package-path", packageRoot.appendingPathComponent("Examples/EmbedderCheck").path,
            "--scratch-path", scratch.path, "--manifest-cache", "local", "--target", "Embedder",
        ]
        let result = try await offPool { try runProcess("/usr/bin/env", arguments, timeout: 1_200) }
        #expect(result.status == 0, "swift build: \(result.stdout)\(result.stderr)")
    }
}
