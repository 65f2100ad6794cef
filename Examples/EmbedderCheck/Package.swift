// swift-tools-version:6.0
import PackageDescription

// An application that embeds the `Baton` library and has modules of its own named like the ecosystem's
// (swift-log's `Logging`, and `JSON`, `JOSE`, `Postgres`, `HTTPServer`, `AppleSignIn`). SwiftPM refuses two modules
// with one name in a package graph, so this builds only while Baton's modules keep names of their own.
// The main suite builds it (Tests/EmbedderTests).
let package = Package(
    name: "EmbedderCheck",
    dependencies: [.package(name: "Baton", path: "../..")],
    targets: [
        .target(name: "Logging"),
        .target(name: "JSON"),
        .target(name: "JOSE"),
        .target(name: "Postgres"),
        .target(name: "HTTPServer"),
        .target(name: "AppleSignIn"),
        .target(
            name: "Embedder",
            dependencies: ["Logging", "JSON", "JOSE", "Postgres", "HTTPServer", "AppleSignIn", .product(name: "Baton", package: "Baton")]
        ),
    ],
    swiftLanguageModes: [.v6]
)
