import Foundation
import PackagePlugin

/// Records the commit a build is made from: before every build, `scripts/build-commit.sh` writes it as Swift source
/// (`let buildCommit = "…"`) into the plugin's work directory, which the target compiles. The script rewrites the
/// file only when the commit changed, so a build at the same commit recompiles nothing, and it writes `unknown`
/// when the package directory is not the top of a git work tree (a source archive), so a commit is never stale.
@main
struct BuildCommitPlugin: BuildToolPlugin {
    func createBuildCommands(context: PluginContext, target: any Target) throws -> [Command] {
        let generated = context.pluginWorkDirectoryURL.appending(path: "Generated")
        let package = context.package.directoryURL
        return [
            .prebuildCommand(
                displayName: "Recording the commit \(target.name) is built from",
                executable: URL(fileURLWithPath: "/bin/sh"),
                arguments: [package.appending(path: "scripts/build-commit.sh").path, package.path,
                            generated.appending(path: "BuildCommit.swift").path],
                outputFilesDirectory: generated
            ),
        ]
    }
}
