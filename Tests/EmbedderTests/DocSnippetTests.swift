import Foundation
import TestSupport
import Testing

/// A ```swift block of a Markdown file.
struct SwiftBlock: Equatable {
    /// The Markdown file.
    var path: String
    /// The line of the block's first line of code, from 1.
    var line: Int
    /// The code, its fence's indentation removed.
    var code: [String]
}

/// The documentation's Swift examples, compiled as an embedder would write them.
enum DocSnippets {
    /// The word after `swift` on a fence that keeps the block out of the build; the rest of the line says why
    /// (```` ```swift not-compiled: needs Hummingbird ````). Renderers read only the first word, `swift`.
    static let notCompiled = "not-compiled"

    /// Baton's library products, the dependencies of the package the blocks are compiled in.
    static let products = ["Baton", "BatonAppleSignIn", "BatonJOSE", "BatonJSON", "BatonPostgres"]

    /// The Markdown files whose blocks are compiled: README.md and docs/*.md.
    static func documents() throws -> [URL] {
        let docs = packageRoot.appendingPathComponent("docs")
        let pages = try FileManager.default.contentsOfDirectory(atPath: docs.path).filter { $0.hasSuffix(".md") }.sorted()
        return [packageRoot.appendingPathComponent("README.md")] + pages.map { docs.appendingPathComponent($0) }
    }

    /// The blocks of `text` fenced ```` ```swift ````; those marked ``notCompiled`` are left out.
    /// - Throws: when another word follows `swift` on a fence, or a block is not closed.
    static func blocks(in text: String, path: String) throws -> [SwiftBlock] {
        var blocks: [SwiftBlock] = []
        var open: (block: SwiftBlock, indent: Int, compiled: Bool)?
        for (index, line) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
            let trimmed = line.trimmingCharacters(in: .whitespaces)
            if var current = open {
                if trimmed == "```" {
                    if current.compiled { blocks.append(current.block) }
                    open = nil
                } else {
                    let indent = min(current.indent, line.prefix(while: { $0 == " " }).count)
                    current.block.code.append(String(line.dropFirst(indent)))
                    open = current
                }
                continue
            }
            guard trimmed.hasPrefix("```") else { continue }
            let words = trimmed.dropFirst(3).split(separator: " ", maxSplits: 1)
            guard words.first == "swift" else {
                open = (SwiftBlock(path: path, line: index + 2, code: []), line.prefix(while: { $0 == " " }).count, false)
                continue
            }
            let marker = words.count > 1 ? words[1].split(separator: ":", maxSplits: 1).first.map(String.init) : nil
            guard marker == nil || marker == notCompiled else {
                throw TestSupportError("\(path):\(index + 1): a swift fence says \(words[1]); only '\(notCompiled): why' may follow swift")
            }
            open = (SwiftBlock(path: path, line: index + 2, code: []), line.prefix(while: { $0 == " " }).count, marker == nil)
        }
        if let open { throw TestSupportError("\(path):\(open.block.line - 1): a code block is not closed") }
        return blocks
    }

    /// The Swift file compiling `block`: its imports (and `import Baton`) at the top, the rest as the body of an
    /// async throwing method of `SnippetContext` (Examples/DocSnippets), with the Markdown file's line numbers, so an
    /// error names the line of the documentation.
    static func source(of block: SwiftBlock, method: String) -> String {
        let isImport = { (line: String) in line.hasPrefix("import ") }
        let location = { (offset: Int) in "#sourceLocation(file: \"\(block.path)\", line: \(block.line + offset))\n" }
        let imports = block.code.enumerated().filter { isImport($0.element) }.map { location($0.offset) + $0.element + "\n" }
        let body = block.code.map { isImport($0) ? "" : $0 }
        return "import Baton\n" + imports.joined() + (imports.isEmpty ? "" : "#sourceLocation()\n") + "\nextension SnippetContext {\n    func \(method)() async throws {\n"
            + location(0) + body.joined(separator: "\n") + "\n#sourceLocation()\n    }\n}\n"
    }

    /// The name of the method compiling `block`: `docs_library_md_7`.
    static func method(for block: SwiftBlock) -> String {
        let relative = block.path.hasPrefix(packageRoot.path + "/") ? String(block.path.dropFirst(packageRoot.path.count + 1)) : block.path
        return String((relative + "_\(block.line)").map { $0.isLetter || $0.isNumber ? $0 : "_" })
    }

    /// Writes a package in `directory` depending on Baton's library ``products`` and Examples/EmbedderCheck's
    /// `Logging`, whose `DocSnippets` target holds `SnippetContext` and one file per block.
    static func writePackage(in directory: URL, blocks: [SwiftBlock]) throws {
        let manager = FileManager.default
        let sources = directory.appendingPathComponent("Sources/DocSnippets")
        let logging = directory.appendingPathComponent("Sources/Logging")
        try manager.createDirectory(at: sources, withIntermediateDirectories: true)
        try manager.createDirectory(at: logging, withIntermediateDirectories: true)
        try manager.copyItem(at: packageRoot.appendingPathComponent("Examples/EmbedderCheck/Sources/Logging/Logger.swift"),
                             to: logging.appendingPathComponent("Logger.swift"))
        try manager.copyItem(at: packageRoot.appendingPathComponent("Examples/DocSnippets/SnippetContext.swift"),
                             to: sources.appendingPathComponent("SnippetContext.swift"))
        let dependencies = products.map { ".product(name: \"\($0)\", package: \"Baton\")" }.joined(separator: ", ")
        let manifest = """
            // swift-tools-version:6.0
            import PackageDescription

            let package = Package(
                name: "DocSnippets",
                dependencies: [.package(name: "Baton", path: #"\(packageRoot.path)"#)],
                targets: [
                    .target(name: "Logging"),
                    .target(name: "DocSnippets", dependencies: ["Logging", \(dependencies)]),
                ],
                swiftLanguageModes: [.v6]
            )

            """
        try Data(manifest.utf8).write(to: directory.appendingPathComponent("Package.swift"))
        for block in blocks { try add(block, to: directory) }
    }

    /// Adds the file compiling `block` to the package in `directory`.
    static func add(_ block: SwiftBlock, to directory: URL) throws {
        let name = method(for: block)
        try Data(source(of: block, method: name).utf8)
            .write(to: directory.appendingPathComponent("Sources/DocSnippets/\(name).swift"))
    }

    /// Builds the `DocSnippets` target of the package in `directory`, its build in `scratch`.
    static func build(_ directory: URL, scratch: URL) async throws -> ProcessResult {
        let arguments = ["swift", "build", "--package-path", directory.path, "--scratch-path", scratch.path,
                         "--manifest-cache", "local", "--target", "DocSnippets"]
        return try await offPool { try runProcess("/usr/bin/env", arguments, timeout: 1_200) }
    }
}

@Suite("The documentation's Swift examples")
struct DocSnippetTests {
    @Test("every swift block of README.md and docs/*.md builds against Baton's library products; a block that rots fails at its line")
    func snippetsBuild() async throws {
        let blocks = try DocSnippets.documents().flatMap { url in
            try DocSnippets.blocks(in: String(contentsOf: url, encoding: .utf8), path: url.path)
        }
        let library = packageRoot.appendingPathComponent("docs/library.md").path
        #expect(blocks.filter { $0.path == library }.count >= 3, "docs/library.md's examples were not found")

        // The package and its build (Baton's library modules and the blocks) in a scratch directory removed afterwards.
        let scratch = FileManager.default.temporaryDirectory.appendingPathComponent("baton-snippets-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: scratch) }
        let package = scratch.appendingPathComponent("package")
        let build = scratch.appendingPathComponent("build")
        try DocSnippets.writePackage(in: package, blocks: blocks)
        let result = try await DocSnippets.build(package, scratch: build)
        #expect(result.status == 0, "swift build: \(result.stdout)\(result.stderr)")

        // The guide's old switch, without `unmatched`: the same build fails and names the Markdown line.
        let rotten = """
            The outcomes:

            ```swift
            switch try await engine.signIn(idToken: idToken).outcome {
            case .current, .migrated, .new: break
            }
            ```
            """
        try DocSnippets.add(try #require(DocSnippets.blocks(in: rotten, path: "/rotten.md").first), to: package)
        let failed = try await DocSnippets.build(package, scratch: build)
        #expect(failed.status != 0)
        #expect((failed.stdout + failed.stderr).contains("/rotten.md:4:1: error: switch must be exhaustive"), "\(failed.stdout)\(failed.stderr)")
    }

    @Test("fences: swift blocks are compiled from their first line of code, not-compiled ones are left out", arguments: [
        ("```swift\nlet a = 1\n```\n", [SwiftBlock(path: "d.md", line: 2, code: ["let a = 1"])]),
        ("text\n  ```swift\n  let a = 1\n    a\n  ```\n", [SwiftBlock(path: "d.md", line: 3, code: ["let a = 1", "  a"])]),
        ("```swift not-compiled: needs Hummingbird\nrouter.post()\n```\n```swift\nb\n```", [SwiftBlock(path: "d.md", line: 5, code: ["b"])]),
        ("```sql\n```swift\n```\n", []),
        ("```\nswift\n```\n", []),
    ])
    func fences(_ text: String, _ expected: [SwiftBlock]) throws {
        #expect(try DocSnippets.blocks(in: text, path: "d.md") == expected)
    }

    @Test("a fence with another word after swift, or a block left open, is refused", arguments: [
        "```swift no-compile\nlet a = 1\n```\n",
        "```swift\nlet a = 1\n",
    ])
    func badFences(_ text: String) {
        #expect(throws: TestSupportError.self) { try DocSnippets.blocks(in: text, path: "d.md") }
    }

    @Test("a block's imports go to the top of its file, the rest keeps the Markdown line numbers")
    func source() {
        let block = SwiftBlock(path: "/docs/x.md", line: 10, code: ["import BatonLogging", "let a = 1"])
        #expect(DocSnippets.source(of: block, method: "m") == """
            import Baton
            #sourceLocation(file: "/docs/x.md", line: 10)
            import BatonLogging
            #sourceLocation()

            extension SnippetContext {
                func m() async throws {
            #sourceLocation(file: "/docs/x.md", line: 10)

            let a = 1
            #sourceLocation()
                }
            }

            """)
    }
}
