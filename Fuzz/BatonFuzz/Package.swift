// swift-tools-version:6.0
import Foundation
import PackageDescription

/// libFuzzer targets for Baton's token verifier and JSON reader, kept out of the main package so that
/// `swift build` never needs the fuzzer runtime. Build and run them with `scripts/fuzz.sh` (`make fuzz`),
/// which passes `--sanitize=fuzzer --sanitize=address`: every module, BatonJSON, BatonJOSE and BatonAppleSignIn included, is
/// then compiled with coverage instrumentation and address checks.
let fuzzerEntryPoint: [SwiftSetting] = [
    .enableUpcomingFeature("ExistentialAny"),
    // libFuzzer provides `main`; the target only exports `LLVMFuzzerTestOneInput`.
    .unsafeFlags(["-parse-as-library"]),
]

/// The main package, two levels up; SwiftPM names a path dependency after its directory.
let batonDirectory = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
let baton = batonDirectory.lastPathComponent

let package = Package(
    name: "BatonFuzz",
    dependencies: [.package(path: batonDirectory.path)],
    targets: [
        .target(
            name: "FuzzSupport",
            dependencies: [
                .product(name: "BatonJSON", package: baton), .product(name: "BatonJOSE", package: baton),
                .product(name: "BatonAppleSignIn", package: baton),
            ],
            swiftSettings: [.enableUpcomingFeature("ExistentialAny")]
        ),
        .executableTarget(name: "fuzz-verifier", dependencies: ["FuzzSupport"], swiftSettings: fuzzerEntryPoint),
        .executableTarget(name: "fuzz-json", dependencies: ["FuzzSupport"], swiftSettings: fuzzerEntryPoint),
    ],
    swiftLanguageModes: [.v6]
)
