/// Every subcommand, in the order `baton --help` lists them.
let commands: [Command] = [
    verifyCommand,
    clientSecretCommand,
    dbCommand,
    doctorCommand,
    emulatorCommand,
    importCommand,
    transferIDsCommand,
    exchangeCommand,
    serveCommand,
    benchCommand,
    reportCommand,
]
