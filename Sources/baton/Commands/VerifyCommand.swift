import BatonConcurrency
import BatonCommandLine
import BatonAppleSignIn
import Foundation
import BatonJOSE
import BatonJSON

/// `baton verify`: verifies one identity token and prints its claims.
let verifyCommand = Command(
    name: "verify",
    summary: "verify an identity token and print its claims as JSON",
    arguments: "TOKEN",
    abstract: """
    Verifies TOKEN (or standard input when TOKEN is '-') as a Sign in with Apple identity token:
    RS256 only, key by 'kid', iss https://appleid.apple.com, aud one of the --client-id values,
    exp/iat/nbf with 60 s leeway, and the nonce when --nonce is given.
    """,
    options: VerifyOptions.self,
    discussion: """
    Exit 0 with the claims as JSON on stdout; 1 with 'rejected: <reason>: <explanation>' on stderr;
    2 for usage or configuration errors.
    """,
    run: runVerify
)

/// The options of `baton verify`.
private struct VerifyOptions: CommandOptions {
    let clientID = Option.repeatable("client-id", "ID", "an accepted audience; repeat for several").required()
    let jwks = Option.text("jwks", "FILE", "a JWK Set file")
    let jwksURL = Option.text("jwks-url", "URL", "fetch the JWK Set from URL (e.g. https://appleid.apple.com/auth/keys)")
    let nonce = Option.text("nonce", "N", "require this nonce: its SHA-256 hex (native flow) or itself (web flow)")
    let nonceFlow = Option.choice("nonce-flow", default: ExpectedNonce.Flow.native, "the flow that made the nonce")
    let now = Option.text("now", "UNIX", "judge exp/iat/nbf at this Unix time instead of the system clock")
}

/// The longest token read from standard input before refusing it as too large.
private let standardInputLimit = 1 << 20

/// The largest JWK Set file read.
private let keySetFileLimit = 1 << 20

@Sendable
private func runVerify(_ arguments: Parsed<VerifyOptions>) async throws -> Int32 {
    let clientIDs = arguments.clientID.filter { !$0.isEmpty }
    guard arguments.positionals.count == 1, let tokenArgument = arguments.positionals.first else {
        throw CommandFailure.usage(arguments.positionals.isEmpty ? "missing TOKEN" : "expected one TOKEN")
    }
    let flow = arguments.nonceFlow
    let nonce = arguments.nonce.map { ExpectedNonce($0, flow: flow) }
    var now: @Sendable () -> Date = { Date() }
    if let text = arguments.now {
        guard let seconds = Double(text), seconds.isFinite, seconds >= 0 else {
            throw CommandFailure.usage("--now must be a Unix time in seconds")
        }
        now = { Date(timeIntervalSince1970: seconds) }
    }

    let keys: any VerificationKeyProvider
    switch (arguments.jwks, arguments.jwksURL) {
    case (let path?, nil):
        let bytes = try await offPool { try readFile(path, limit: keySetFileLimit) }
        do {
            keys = FixedKeySet(try JWKSet(json: bytes))
        } catch {
            throw CommandFailure.usage("--jwks \(path): not a usable JWK Set (\(error))")
        }
    case (nil, let text?):
        guard let url = URL(string: text), let scheme = url.scheme?.lowercased(), scheme == "https" || scheme == "http" else {
            throw CommandFailure.usage("--jwks-url must be an http or https URL")
        }
        let cache = KeySetCache(url: url, now: now)
        do {
            try await cache.refresh()
        } catch {
            throw CommandFailure.failed("baton verify: cannot fetch the key set from \(text): \(error)")
        }
        keys = cache
    case (nil, nil):
        throw CommandFailure.usage("give --jwks FILE or --jwks-url URL")
    case (.some, .some):
        throw CommandFailure.usage("give only one of --jwks and --jwks-url")
    }

    let token: String
    if tokenArgument == "-" {
        let bytes = await offPool { readStandardInput(limit: standardInputLimit) }
        guard bytes.count <= standardInputLimit else {
            throw CommandFailure.rejected("rejected: \(VerificationError.Code.tooLarge.rawValue): standard input exceeds \(standardInputLimit) bytes")
        }
        token = String(decoding: bytes, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
    } else {
        token = tokenArgument
    }

    let verifier = IdentityTokenVerifier(clientIDs: clientIDs, keys: keys, now: now)
    do {
        let verified = try await verifier.verify(token, nonce: nonce)
        print(JSON.serialize(.object(verified.claims)))
        return 0
    } catch let error as VerificationError {
        throw CommandFailure.rejected("rejected: \(error.code.rawValue): \(error.reason)")
    }
}

/// Reads at most `limit` bytes of the file at `path`.
private func readFile(_ path: String, limit: Int) throws -> [UInt8] {
    guard let handle = FileHandle(forReadingAtPath: path) else { throw CommandFailure.usage("cannot read \(path)") }
    defer { try? handle.close() }
    let data = (try? handle.read(upToCount: limit + 1)) ?? Data()
    guard data.count <= limit else { throw CommandFailure.usage("\(path) is larger than \(limit) bytes") }
    return [UInt8](data)
}

/// Reads standard input to its end, stopping once more than `limit` bytes have arrived.
private func readStandardInput(limit: Int) -> [UInt8] {
    var bytes: [UInt8] = []
    while bytes.count <= limit {
        guard let chunk = try? FileHandle.standardInput.read(upToCount: 64 * 1024), !chunk.isEmpty else { break }
        bytes.append(contentsOf: chunk)
    }
    return bytes
}
