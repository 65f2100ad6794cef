import BatonEmulator
import BatonHTTPServer

/// Runs `body` with `resource`, then `teardown`, whether `body` returns or throws: the `defer` that can
/// await (postgres-nio's `withConnection`, ServiceLifecycle's scoped services).
public func withTeardown<Resource, Result>(
    _ resource: Resource,
    teardown: (Resource) async -> Void,
    _ body: (Resource) async throws -> Result
) async throws -> Result {
    let result: Result
    do {
        result = try await body(resource)
    } catch {
        await teardown(resource)
        throw error
    }
    await teardown(resource)
    return result
}

/// Starts the emulator on loopback, runs `body` with it and stops it afterwards, whatever happens.
/// - Parameters:
///   - port: the port to listen on (0: any free one).
///   - statePath: the emulator's state file, if it keeps one.
public func withEmulator<Result>(
    port: Int = 0,
    statePath: String? = nil,
    _ body: (AppleEmulator) async throws -> Result
) async throws -> Result {
    let emulator = try await AppleEmulator.start(port: port, statePath: statePath)
    return try await withTeardown(emulator, teardown: { await $0.stop() }, body)
}

/// Creates a fresh database named after `prefix` (``TestDatabase/create(_:on:)``), runs `body` with its URL
/// and drops it afterwards, whatever happens.
/// - Parameter server: the server's URL; the shared test cluster's when nil.
public func withDatabase<Result>(
    _ prefix: String = "test",
    on server: String? = nil,
    _ body: (String) async throws -> Result
) async throws -> Result {
    let url = try await offPool { try TestDatabase.create(prefix, on: server ?? TestDatabase.serverURL()) }
    return try await withTeardown(url, teardown: { url in _ = try? await offPool { try TestDatabase.drop(url) } }, body)
}

/// Starts an HTTP server with `router` on a free loopback port, runs `body` with it and its port, and stops it
/// afterwards, whatever happens.
public func withServer<Result>(
    _ router: Router,
    configuration: HTTPServerConfiguration = HTTPServerConfiguration(),
    _ body: (HTTPServer, Int) async throws -> Result
) async throws -> Result {
    let server = HTTPServer(router: router, configuration: configuration)
    let port = try await server.start(host: "127.0.0.1", port: 0)
    return try await withTeardown(server, teardown: { await $0.stop() }) { try await body($0, port) }
}
