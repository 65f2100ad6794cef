/// Every subcommand, in the order `baton --help` lists them.
let commands: [Command] = [
    dbCommand,
    verifyCommand,
    emulatorCommand,
    benchCommand,
]
