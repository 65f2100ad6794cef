import BatonTools
import Baton

/// `baton transfer-ids`: the sender side, creating a transfer identifier for every legacy user.
let transferIDsCommand = Command(
    name: "transfer-ids",
    summary: "sender side: create a transfer identifier for every legacy user",
    abstract: """
    Walks the legacy table (legacy.*) in key order and, for every user without a transfer
    identifier, asks Apple (sending team's credentials) for one made for the target team, and
    stores old_sub → transfer_sub in baton.transfers.
    """,
    options: [
        .text("target", "TEAMID", "the recipient's team (default apple.transfer.recipient.team_id); the sending\nteam itself is refused"),
        .flag("yes", "do not ask for confirmation after showing the target and a sample"),
    ] + bulkOptions,
    discussion: """
    Resumable and safe to run from several processes.
    Exit status: 0 every user done, 1 some user failed or the job stopped, 2 usage or configuration.
    """,
    run: { parsed in
        try await runBulkCommand(parsed, side: .sender)
    }
)
