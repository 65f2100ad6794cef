import BatonTools

/// Every subcommand, in the order `baton --help` lists them.
let commands: [Command] = [
    verifyCommand,
    clientSecretCommand,
    dbCommand,
    doctorCommand,
    emulatorCommand,
    serveCommand,
    importCommand,
    transferIDsCommand,
    exchangeCommand,
    mergeCommand,
    rollbackCommand,
    benchCommand,
    reportCommand,
    demoCommand,
    rehearseCommand,
    fuzzCommand,
    completionsCommand,
]
