// swift-tools-version:6.0
import PackageDescription

/// Settings every Swift target shares: Swift 6 language mode with strict concurrency,
/// and `any` spelled out for existentials.
let swiftSettings: [SwiftSetting] = [
    .enableUpcomingFeature("ExistentialAny"),
]

let package = Package(
    name: "Baton",
    products: [
        .executable(name: "baton", targets: ["baton"]),
        // The workbench (benchmarks, HTTP fuzzer); scripts/dist.sh packages `baton` alone.
        .executable(name: "baton-bench", targets: ["baton-bench"]),
        // What an embedder links for sign-ins: the decision, its drivers, the configuration, the legacy store.
        .library(name: "Baton", targets: ["Baton"]),
        // The bulk jobs (exchange, transfer identifiers, import/export, the throttle), for an embedder that runs them
        // from its own scheduler instead of `baton exchange`; linking `Baton` alone does not bring them.
        .library(name: "BatonJobs", targets: ["BatonJobs"]),
        // The correlation report and its JSON, CSV, HTML and SVG renderings, for an embedder that serves or stores
        // the report itself; linking `Baton` alone does not bring the renderer.
        .library(name: "BatonReport", targets: ["BatonReport"]),
        .library(name: "BatonAppleSignIn", targets: ["BatonAppleSignIn"]),
        .library(name: "BatonJOSE", targets: ["BatonJOSE"]),
        .library(name: "BatonJSON", targets: ["BatonJSON"]),
        .library(name: "BatonPostgres", targets: ["BatonPostgres"]),
    ],
    targets: [
        // C libraries from Debian packages, found through pkg-config.
        .systemLibrary(name: "CBatonOpenSSL", pkgConfig: "openssl", providers: [.apt(["libssl-dev"])]),
        .systemLibrary(name: "CBatonLibPQ", pkgConfig: "libpq", providers: [.apt(["libpq-dev"])]),
        .systemLibrary(name: "CBatonMicroHTTPD", pkgConfig: "libmicrohttpd", providers: [.apt(["libmicrohttpd-dev"])]),
        // Linux's epoll and eventfd headers (glibc), which Swift's Glibc module does not include.
        .systemLibrary(name: "CBatonEpoll"),

        .target(name: "BatonErrors", swiftSettings: swiftSettings),
        // The one strict JSON reader, writer and string escaper, below every module that reads or writes JSON.
        .target(name: "BatonJSON", dependencies: ["BatonErrors"], swiftSettings: swiftSettings),
        .target(name: "BatonLogging", dependencies: ["BatonJSON"], swiftSettings: swiftSettings),
        .target(name: "BatonConcurrency", dependencies: ["CBatonEpoll"], swiftSettings: swiftSettings),
        // Child processes (posix_spawn, waitpid), for the tools and the tests; no library product exposes it.
        .target(name: "BatonProcess", dependencies: ["BatonConcurrency"], swiftSettings: swiftSettings),
        .target(name: "BatonJOSE", dependencies: ["CBatonOpenSSL", "BatonErrors", "BatonJSON"], swiftSettings: swiftSettings),
        .target(name: "BatonAppleSignIn", dependencies: ["BatonErrors", "BatonJOSE", "BatonJSON", "BatonLogging", "BatonConcurrency"], swiftSettings: swiftSettings),
        .target(name: "BatonPostgres", dependencies: ["CBatonLibPQ", "BatonLogging", "BatonConcurrency"], swiftSettings: swiftSettings),
        .target(name: "BatonHTTPServer", dependencies: ["CBatonMicroHTTPD", "BatonErrors", "BatonJSON", "BatonLogging", "BatonConcurrency"], swiftSettings: swiftSettings),
        .target(name: "Baton", dependencies: ["BatonErrors", "BatonAppleSignIn", "BatonJOSE", "BatonJSON", "BatonPostgres", "BatonLogging", "BatonConcurrency"], resources: [.copy("Schema")], swiftSettings: swiftSettings),
        // The bulk jobs on top of the sign-in library: the worker and its policy, the queues, the throttle.
        .target(name: "BatonJobs", dependencies: ["Baton", "BatonErrors", "BatonAppleSignIn", "BatonPostgres", "BatonLogging", "BatonConcurrency"], swiftSettings: swiftSettings),
        // The correlation report on top of the sign-in library: its builder and its renderings (JSON, CSV, HTML, SVG).
        .target(name: "BatonReport", dependencies: ["Baton", "BatonPostgres", "BatonLogging"], swiftSettings: swiftSettings),
        // The version and the commit a build is made from (the plugin records the commit before every build).
        .target(name: "BatonBuildInfo", swiftSettings: swiftSettings, plugins: ["BuildCommitPlugin"]),
        .plugin(name: "BuildCommitPlugin", capability: .buildTool()),
        .target(name: "BatonService", dependencies: ["BatonBuildInfo", "Baton", "BatonReport", "BatonAppleSignIn", "BatonHTTPServer", "BatonJOSE", "BatonJSON", "BatonLogging", "BatonConcurrency"], swiftSettings: swiftSettings),
        .target(name: "BatonEmulator", dependencies: ["BatonErrors", "BatonAppleSignIn", "BatonJOSE", "BatonJSON", "BatonHTTPServer", "BatonLogging", "BatonConcurrency"], swiftSettings: swiftSettings),
        // The command-line kit of the executables: typed options, parsing, help, shell completion, the dispatch
        // from the command word, signals and teardown. No library product exposes it.
        .target(name: "BatonCommandLine", dependencies: ["Baton", "BatonLogging"], swiftSettings: swiftSettings),
        // The one raw-socket HTTP/1.1 client, to loopback servers only: the rehearsal's devices, the workbench and the tests.
        .target(name: "BatonRawHTTP", swiftSettings: swiftSettings),
        // `baton demo`: the scenario on a throwaway database against the in-process emulator.
        .target(
            name: "BatonDemo",
            dependencies: ["BatonCommandLine", "BatonService", "Baton", "BatonJobs", "BatonReport", "BatonEmulator", "BatonAppleSignIn", "BatonJOSE", "BatonJSON", "BatonPostgres", "BatonHTTPServer", "BatonLogging", "BatonConcurrency"],
            swiftSettings: swiftSettings
        ),
        // `baton rehearse`: a transfer rehearsed on a copy of the application's database in a throwaway cluster.
        .target(
            name: "BatonRehearsal",
            dependencies: ["BatonCommandLine", "BatonRawHTTP", "BatonService", "Baton", "BatonJobs", "BatonReport", "BatonEmulator", "BatonAppleSignIn", "BatonJSON", "BatonPostgres", "BatonHTTPServer", "BatonConcurrency", "BatonProcess"],
            swiftSettings: swiftSettings
        ),
        .executableTarget(
            name: "baton",
            dependencies: ["BatonBuildInfo", "BatonCommandLine", "BatonDemo", "BatonRehearsal", "BatonService", "Baton", "BatonJobs", "BatonReport", "BatonEmulator", "BatonAppleSignIn", "BatonJOSE", "BatonJSON", "BatonPostgres", "BatonHTTPServer", "BatonLogging", "BatonConcurrency"],
            swiftSettings: swiftSettings
        ),
        // The workbench, never shipped and never linked by `baton`: the benchmarks and the HTTP fuzzer
        // (`baton-bench signin`, `baton-bench fuzz http`), and the load generator the HTTP server's tests use.
        .target(
            name: "BatonBench",
            dependencies: ["BatonCommandLine", "BatonRawHTTP", "Baton", "BatonJobs", "BatonEmulator", "BatonAppleSignIn", "BatonJOSE", "BatonJSON", "BatonPostgres", "BatonHTTPServer", "BatonLogging", "BatonConcurrency", "BatonProcess"],
            swiftSettings: swiftSettings
        ),
        .executableTarget(name: "baton-bench", dependencies: ["BatonBench", "BatonBuildInfo", "BatonCommandLine"], swiftSettings: swiftSettings),

        // Shared helpers for tests: scoped databases, emulators and servers that always tear down, the built binary.
        .target(name: "TestSupport", dependencies: ["BatonEmulator", "BatonHTTPServer", "BatonPostgres", "BatonConcurrency", "BatonProcess"], path: "Tests/TestSupport", swiftSettings: swiftSettings),
        .testTarget(name: "BatonJSONTests", dependencies: ["BatonJSON"], swiftSettings: swiftSettings),
        .testTarget(name: "BatonJOSETests", dependencies: ["BatonJOSE", "BatonJSON"], swiftSettings: swiftSettings),
        .testTarget(name: "BatonAppleSignInTests", dependencies: ["BatonAppleSignIn", "BatonJOSE", "BatonJSON", "BatonEmulator", "BatonHTTPServer", "TestSupport"], swiftSettings: swiftSettings),
        .testTarget(name: "BatonPostgresTests", dependencies: ["BatonPostgres", "BatonConcurrency", "TestSupport"], swiftSettings: swiftSettings),
        .testTarget(name: "BatonHTTPServerTests", dependencies: ["BatonErrors", "BatonHTTPServer", "BatonConcurrency", "BatonBench", "BatonRawHTTP", "TestSupport"], swiftSettings: swiftSettings),
        .testTarget(name: "BatonTests", dependencies: ["Baton", "BatonJobs", "BatonReport", "BatonAppleSignIn", "BatonConcurrency", "TestSupport", "BatonEmulator"], swiftSettings: swiftSettings),
        .testTarget(name: "BatonServiceTests", dependencies: ["BatonBuildInfo", "BatonService", "TestSupport", "Baton", "BatonReport", "BatonEmulator", "BatonAppleSignIn", "BatonHTTPServer", "BatonJOSE", "BatonJSON", "BatonPostgres", "BatonConcurrency"], swiftSettings: swiftSettings),
        .testTarget(name: "BatonEmulatorTests", dependencies: ["BatonEmulator", "BatonAppleSignIn", "BatonJSON", "TestSupport"], swiftSettings: swiftSettings),
        .testTarget(name: "CLITests", dependencies: ["BatonBuildInfo", "BatonEmulator", "BatonJOSE", "BatonJSON", "BatonProcess", "TestSupport"], swiftSettings: swiftSettings),
        // The command-line kit itself (parsing, typed options, help), without running the binary.
        .testTarget(name: "BatonCommandLineTests", dependencies: ["BatonCommandLine", "BatonLogging"], swiftSettings: swiftSettings),
        // The fault suite: `baton serve` and `baton exchange` as child processes under outages (`make faults`).
        .testTarget(name: "FaultTests", dependencies: ["BatonEmulator", "TestSupport"], swiftSettings: swiftSettings),
        // Builds Examples/EmbedderCheck (an embedder's own `Logging`, `JOSE`, … modules beside the `Baton` product) and
        // the ```swift blocks of README.md and docs/*.md against the library products (Examples/DocSnippets).
        .testTarget(name: "EmbedderTests", dependencies: ["TestSupport"], swiftSettings: swiftSettings),
    ],
    swiftLanguageModes: [.v6]
)
