import BatonCommandLine
import BatonDemo
import BatonRehearsal

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
    reportCommand,
    demoCommand,
    rehearseCommand,
    completionsCommand,
]
