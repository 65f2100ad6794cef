import Baton

/// `baton transfer-ids`: the sender side, creating a transfer identifier for every legacy user.
let transferIDsCommand = Command(
    name: "transfer-ids",
    summary: "sender side: create a transfer identifier for every legacy user",
    usage: """
        usage: baton transfer-ids [--target TEAMID] [--yes] [--workers N] [--rate R] [--dry-run]
                                  [--config FILE] [--lease SECONDS] [--max-failures N] [--retry-failed]
                                  [--retry-unresolvable] [--db-retry-seconds S]

        Walks the legacy table (legacy.*) in key order and, for every user without a transfer
        identifier, asks Apple (sending team's credentials) for one made for the target team, and
        stores old_sub → transfer_sub in baton.transfers.
          --target TEAMID   the recipient's team (default apple.transfer.recipient.team_id); the sending
                            team itself is refused
          --yes             do not ask for confirmation after showing the target and a sample
        Other options as for 'baton exchange'. Resumable and safe to run from several processes.
        Exit status: 0 every user done, 1 some user failed or the job stopped, 2 usage or configuration.
        """,
    run: { arguments in
        try await runBulkCommand(arguments, side: .sender)
    }
)
