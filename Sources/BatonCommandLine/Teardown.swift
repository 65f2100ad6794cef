/// Runs `body`, then `teardown`, whether `body` returned or threw: a scoped lifetime for what a command opened
/// (a pool, an emulator).
package func withTeardown<Result>(_ body: () async throws -> Result, teardown: () async -> Void) async throws -> Result {
    do {
        let result = try await body()
        await teardown()
        return result
    } catch {
        await teardown()
        throw error
    }
}
