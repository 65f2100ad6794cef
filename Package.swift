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
        .library(name: "Baton", targets: ["Baton"]),
        .library(name: "AppleSignIn", targets: ["AppleSignIn"]),
        .library(name: "JOSE", targets: ["JOSE"]),
        .library(name: "Postgres", targets: ["Postgres"]),
    ],
    targets: [
        // C libraries from Debian packages, found through pkg-config.
        .systemLibrary(name: "COpenSSL", pkgConfig: "openssl", providers: [.apt(["libssl-dev"])]),
        .systemLibrary(name: "CLibPQ", pkgConfig: "libpq", providers: [.apt(["libpq-dev"])]),
        .systemLibrary(name: "CMicroHTTPD", pkgConfig: "libmicrohttpd", providers: [.apt(["libmicrohttpd-dev"])]),

        .target(name: "Logging", swiftSettings: swiftSettings),
        .target(name: "JOSE", dependencies: ["COpenSSL"], swiftSettings: swiftSettings),
        .target(name: "AppleSignIn", dependencies: ["JOSE", "Logging"], swiftSettings: swiftSettings),
        .target(name: "Postgres", dependencies: ["CLibPQ", "Logging"], swiftSettings: swiftSettings),
        .target(name: "HTTPServer", dependencies: ["CMicroHTTPD", "Logging"], swiftSettings: swiftSettings),
        .target(name: "Baton", dependencies: ["AppleSignIn", "JOSE", "Postgres", "Logging"], resources: [.copy("Schema")], swiftSettings: swiftSettings),
        .target(name: "BatonService", dependencies: ["Baton", "HTTPServer", "JOSE", "Logging"], swiftSettings: swiftSettings),
        .target(name: "AppleEmulator", dependencies: ["JOSE", "HTTPServer", "Logging"], swiftSettings: swiftSettings),
        .executableTarget(
            name: "baton",
            dependencies: ["BatonService", "Baton", "AppleEmulator", "AppleSignIn", "JOSE", "Postgres", "HTTPServer", "Logging"],
            swiftSettings: swiftSettings
        ),

        // Shared helpers for tests: a fresh database per suite, the emulator on loopback, the built binary.
        .target(name: "TestSupport", dependencies: ["Postgres"], path: "Tests/TestSupport", swiftSettings: swiftSettings),
        .testTarget(name: "JOSETests", dependencies: ["JOSE"], swiftSettings: swiftSettings),
        .testTarget(name: "AppleSignInTests", dependencies: ["AppleSignIn", "JOSE", "AppleEmulator", "HTTPServer", "TestSupport"], swiftSettings: swiftSettings),
        .testTarget(name: "PostgresTests", dependencies: ["Postgres", "TestSupport"], swiftSettings: swiftSettings),
        .testTarget(name: "HTTPServerTests", dependencies: ["HTTPServer", "TestSupport"], swiftSettings: swiftSettings),
        .testTarget(name: "BatonTests", dependencies: ["Baton", "AppleSignIn", "TestSupport", "AppleEmulator"], swiftSettings: swiftSettings),
        .testTarget(name: "BatonServiceTests", dependencies: ["BatonService", "TestSupport", "Baton", "AppleEmulator", "AppleSignIn", "HTTPServer", "JOSE", "Postgres"], swiftSettings: swiftSettings),
        .testTarget(name: "AppleEmulatorTests", dependencies: ["AppleEmulator", "AppleSignIn", "TestSupport"], swiftSettings: swiftSettings),
        .testTarget(name: "CLITests", dependencies: ["AppleEmulator", "JOSE", "TestSupport"], swiftSettings: swiftSettings),
    ],
    swiftLanguageModes: [.v6]
)
