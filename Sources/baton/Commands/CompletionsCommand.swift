import BatonCommandLine
import Foundation

/// `baton completions bash`: prints a completion script made from the commands' own declarations, the same
/// ones `--help` and the parser read, so it never lists an option the command does not take.
let completionsCommand = Command(
    name: "completions",
    summary: "print a shell completion script (completions bash)",
    discussion: """
    Install it for every user (the Debian package ships it there):
      baton completions bash > /usr/share/bash-completion/completions/baton
    or for one shell: source <(baton completions bash)
    """,
    subcommands: [
        Command(
            name: "bash",
            summary: "completion for bash: commands, options, choices and file names",
            options: CompletionsOptions.self,
            run: { _ in
                FileHandle.standardOutput.write(Data(Completions.bash(program: "baton", commands: commands).utf8))
                return 0
            }
        )
    ],
    subcommandsTitle: "shells"
)

/// `baton completions bash` takes no option.
private struct CompletionsOptions: CommandOptions {}
