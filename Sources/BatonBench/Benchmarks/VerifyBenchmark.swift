import BatonCommandLine
import BatonAppleSignIn
import Foundation
import BatonJOSE
import BatonJSON

/// `baton-bench verify [--seconds S]`: full identity-token verification against the bare OpenSSL RS256
/// verification of the same signature with the same key (`EVP_DigestVerifyInit` + `EVP_DigestVerify`).
///
/// The verifier itself calls a leaner primitive (SHA-256, then `EVP_PKEY_verify` on a pooled context), so a
/// third figure, that primitive alone, shows what the parsing and claim checks around it cost.
///
/// Single-threaded figures come from short interleaved rounds (50 ms of verify, 50 ms of OpenSSL, …)
/// totalling at least S seconds each (default 2), so load from other processes affects both sides alike;
/// then both run on every core for S seconds. Besides the wall-clock rates, the process CPU time of the
/// single-threaded rounds gives microseconds of CPU per operation (`*_cpu_us`, `ratio_cpu`), which stay
/// meaningful on a machine shared with other work.
@Sendable
func runVerifyBenchmark(_ arguments: Parsed<VerifyBenchmarkOptions>) async throws -> Int32 {
    let seconds = arguments.seconds

    let fixture = try VerifyBenchmarkFixture()
    let verifier = fixture.verifier
    let token = fixture.token
    let key = fixture.key
    let signature = fixture.signature
    let signingInput = fixture.signingInput

    // The check itself: the token must verify, or the figures are meaningless.
    let verified = try await verifier.verify(token)
    guard verified.subject == fixture.subject, key.opensslVerifyRS256(signature: signature, message: signingInput) else {
        throw CommandFailure.failed("baton-bench verify: the benchmark token does not verify")
    }

    let full: @Sendable () async -> Bool = { (try? await verifier.verify(token)) != nil }
    let bare: @Sendable () async -> Bool = { key.opensslVerifyRS256(signature: signature, message: signingInput) }
    let primitive: @Sendable () async -> Bool = { key.primitiveVerifyRS256(signature: signature, message: signingInput) }

    _ = await measure(full, for: 0.2)
    _ = await measure(bare, for: 0.2)
    let rounds = max(1, Int((seconds / 0.05).rounded(.up)))
    var fullCount = 0, fullTime = 0.0, fullCPU = 0.0, bareCount = 0, bareTime = 0.0, bareCPU = 0.0
    var primitiveCount = 0, primitiveCPU = 0.0
    for _ in 0..<rounds {
        let f = await measure(full, for: seconds / Double(rounds))
        let b = await measure(bare, for: seconds / Double(rounds))
        let p = await measure(primitive, for: seconds / Double(rounds) / 4)
        guard f.failures == 0, b.failures == 0, p.failures == 0 else {
            throw CommandFailure.failed("baton-bench verify: a verification failed")
        }
        fullCount += f.count; fullTime += f.elapsed; fullCPU += f.cpu
        bareCount += b.count; bareTime += b.elapsed; bareCPU += b.cpu
        primitiveCount += p.count; primitiveCPU += p.cpu
    }
    let verifyPerSecond = Double(fullCount) / fullTime
    let opensslPerSecond = Double(bareCount) / bareTime
    let verifyCPU = fullCPU / Double(fullCount) * 1e6, opensslCPU = bareCPU / Double(bareCount) * 1e6
    let primitiveCPUPerOp = primitiveCPU / Double(primitiveCount) * 1e6

    let cores = ProcessInfo.processInfo.activeProcessorCount
    let fullAll = await measureOnAllCores(full, cores: cores, for: seconds)
    let bareAll = await measureOnAllCores(bare, cores: cores, for: seconds)

    print("token: \(token.utf8.count) bytes, RSA-2048, key set of \(fixture.keySetSize) keys, \(cores) cores")
    print(String(format: "one thread:  full verification %.0f/s, bare OpenSSL RS256 %.0f/s, ratio %.3f",
                 verifyPerSecond, opensslPerSecond, verifyPerSecond / opensslPerSecond))
    print(String(format: "CPU per op:  full verification %.2f µs, bare OpenSSL RS256 %.2f µs, ratio %.3f",
                 verifyCPU, opensslCPU, opensslCPU / verifyCPU))
    print(String(format: "primitive:   SHA-256 + EVP_PKEY_verify on a pooled context (what the verifier calls) %.2f µs CPU; verification costs %.2f µs more",
                 primitiveCPUPerOp, verifyCPU - primitiveCPUPerOp))
    print(String(format: "all cores:   full verification %.0f/s, bare OpenSSL RS256 %.0f/s", fullAll, bareAll))
    let figures: JSONValue = [
        "verify_per_s": .number(verifyPerSecond.rounded()),
        "openssl_verify_per_s": .number(opensslPerSecond.rounded()),
        "ratio": .number((verifyPerSecond / opensslPerSecond * 1000).rounded() / 1000),
        "verify_per_s_all_cores": .number(fullAll.rounded()),
        "openssl_verify_per_s_all_cores": .number(bareAll.rounded()),
        "verify_cpu_us": .number((verifyCPU * 100).rounded() / 100),
        "openssl_verify_cpu_us": .number((opensslCPU * 100).rounded() / 100),
        "ratio_cpu": .number((opensslCPU / verifyCPU * 1000).rounded() / 1000),
        "primitive_verify_cpu_us": .number((primitiveCPUPerOp * 100).rounded() / 100),
        "ratio_to_primitive_cpu": .number((primitiveCPUPerOp / verifyCPU * 1000).rounded() / 1000),
        "cores": .number(Double(cores)),
    ]
    print(JSON.serialize(figures))
    return 0
}

/// An Apple-like token, the key set it is verified against, and the pieces the bare side needs.
private struct VerifyBenchmarkFixture {
    let verifier: IdentityTokenVerifier
    let token: String
    let key: RSAPublicKey
    let signature: [UInt8]
    let signingInput: [UInt8]
    let subject = "001234.8a9b0c1d2e3f4a5b6c7d8e9f0a1b2c3d.1234"
    let keySetSize = 3

    init() throws {
        let privateKeys = try (0..<keySetSize).map { _ in try RSAPrivateKey.generate(bits: 2048) }
        let kids = ["W6WcOKB", "fh6Bs8C", "YuyXoY"]
        let keySet = JWKSet(keys: zip(privateKeys, kids).map { JWK(key: .rsa($0.publicKey), kid: $1, use: "sig", alg: "RS256") })
        let issued = 1_795_953_600.0
        let claims: JSONObject = [
            "iss": "https://appleid.apple.com",
            "aud": "com.example.app",
            "exp": .number(issued + 86_400),
            "iat": .number(issued),
            "sub": .string(subject),
            "nonce": .string(Digest.sha256Hex(Array("benchmark-nonce".utf8))),
            "c_hash": "bD4Kx4_wGMF5ZyJwe5PjzQ",
            "email": "q7xk2mfh9d@privaterelay.appleid.com",
            "email_verified": true,
            "is_private_email": true,
            "auth_time": .number(issued),
            "nonce_supported": true,
            "real_user_status": 2,
            "transfer_sub": "000999.0f1e2d3c4b5a69788796a5b4c3d2e1f0.0999",
        ]
        token = try JWS.signRS256(payload: JSON.serializeBytes(.object(claims)), key: privateKeys[1], kid: kids[1])
        let jws = try CompactJWS.parse(token)
        signature = jws.signature
        signingInput = jws.signingInput
        key = privateKeys[1].publicKey
        let cache = KeySetCache(fetcher: UnreachableKeyServer(), seed: keySet, now: { Date(timeIntervalSince1970: issued + 60) })
        verifier = IdentityTokenVerifier(clientIDs: ["com.example.web", "com.example.app"], keys: cache,
                                         now: { Date(timeIntervalSince1970: issued + 60) })
    }
}

/// The benchmark's key set is seeded; nothing is ever fetched.
private struct UnreachableKeyServer: KeySetFetcher {
    struct NoServer: Error {}
    func fetchKeySet() async throws -> [UInt8] { throw NoServer() }
}

/// CPU time used by the whole process so far, in seconds.
private func processCPUTime() -> Double {
    var time = timespec()
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &time)
    return Double(time.tv_sec) + Double(time.tv_nsec) / 1e9
}

/// Runs `operation` repeatedly on the current task for at least `seconds`; also returns the process CPU
/// time spent, meaningful when this is the only busy thread.
private func measure(_ operation: @Sendable () async -> Bool, for seconds: Double) async -> (count: Int, elapsed: Double, failures: Int, cpu: Double) {
    let cpuStart = processCPUTime()
    let start = DispatchTime.now().uptimeNanoseconds
    let deadline = start + UInt64(seconds * 1e9)
    var count = 0, failures = 0
    var now = start
    while now < deadline {
        for _ in 0..<64 where await !operation() { failures += 1 }
        count += 64
        now = DispatchTime.now().uptimeNanoseconds
    }
    return (count, Double(now - start) / 1e9, failures, processCPUTime() - cpuStart)
}

/// Runs `operation` on `cores` concurrent tasks for `seconds`; operations per second in total.
private func measureOnAllCores(_ operation: @escaping @Sendable () async -> Bool, cores: Int, for seconds: Double) async -> Double {
    await withTaskGroup(of: Double.self) { group in
        for _ in 0..<cores {
            group.addTask {
                let result = await measure(operation, for: seconds)
                return Double(result.count) / result.elapsed
            }
        }
        var total = 0.0
        for await rate in group { total += rate }
        return total
    }
}
