/// Every subcommand, in the order `baton --help` lists them.
let commands: [Command] = [
    verifyCommand,
    emulatorCommand,
    benchCommand,
]
