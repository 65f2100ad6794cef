import BatonEmulator
import Foundation
import TestSupport
import Testing

/// What `baton` commands run against: a transfer on a live emulator (``EmulatedTransfer``), the teams' keys on
/// disk beside the configuration, and a fresh database.
struct CommandFixture {
    /// What the database holds before the test runs.
    enum Database {
        /// Baton's schema and `public.users` holding every user under their sending-team identifier, with their
        /// transfers pending in `baton.transfers` unless `seedTransfers` is false.
        case migrated(seedTransfers: Bool = true)
        /// Only what `sql` creates: the test applies Baton's schema itself when it wants it.
        case bare(sql: String)
    }

    let emulator: AppleEmulator
    let directory: KeyDirectory
    let transfer: EmulatedTransfer
    let databaseURL: String
    var sender: TeamCredentials { transfer.sender }
    var recipient: TeamCredentials { transfer.recipient }
    var acceptedAt: Date? { transfer.acceptedAt }

    /// Runs `body` with a fixture of `users` people; `accept` false leaves the transfer pending (sender side),
    /// `initiate` false leaves the app with the sending team.
    /// The emulator, the directory and the database go away afterwards, whatever happens.
    static func run(users: Int, initiate: Bool = true, accept: Bool = true, database: Database = .migrated(), _ body: (CommandFixture) async throws -> Void) async throws {
        try await withEmulator { emulator in
            let transfer = try EmulatedTransfer(on: emulator, users: users, initiate: initiate, accept: accept)
            let directory = try KeyDirectory()
            try await withTeardown(directory, teardown: { $0.remove() }) { directory in
                try transfer.writeKeys(to: directory)
                try await withDatabase("cli") { databaseURL in
                    switch database {
                    case .migrated(let seedTransfers):
                        try await migrateWithBaton(databaseURL)
                        let subjects = transfer.users.map(\.userIdentifier)
                        try await offPool {
                            try TestDatabase.createUsersTable(databaseURL, subjects: subjects, emails: subjects.map { "\($0)@privaterelay.appleid.com" })
                            if seedTransfers { try TestDatabase.addTransfers(databaseURL, transfer.transferIdentifiers) }
                        }
                    case .bare(let sql):
                        _ = try await offPool { try TestDatabase.psql(databaseURL, sql) }
                    }
                    try await body(CommandFixture(emulator: emulator, directory: directory, transfer: transfer, databaseURL: databaseURL))
                }
            }
        }
    }

    /// Applies Baton's schema (for a ``Database/bare(sql:)`` database).
    func migrate() async throws {
        try await migrateWithBaton(databaseURL)
    }

    /// Writes the configuration to `name` and returns its path: `acceptedAt` overrides the transfer's
    /// acceptance time, and `edit` changes the tree and its `apple.transfer` part.
    func configuration(_ name: String = "baton.json", acceptedAt: Date? = nil,
                       _ edit: (inout [String: Any], inout [String: Any]) -> Void = { _, _ in }) throws -> String {
        var tree = transfer.configuration(databaseURL: databaseURL, appleBaseURL: emulator.baseURL, acceptedAt: acceptedAt)
        var apple = tree["apple"] as! [String: Any]
        var transferTree = apple["transfer"] as! [String: Any]
        edit(&tree, &transferTree)
        apple = tree["apple"] as! [String: Any]
        apple["transfer"] = transferTree
        tree["apple"] = apple
        return try directory.writeJSON(name, tree)
    }

    func count(_ sql: String) throws -> Int { Int(try TestDatabase.psql(databaseURL, sql)) ?? -1 }

    /// Checks that every user was migrated exactly once: one event each, every legacy row rewritten.
    func expectEveryoneMigratedOnce(_ users: Int) throws {
        #expect(try count("SELECT count(*) FROM baton.transfers WHERE state = 'migrated'") == users)
        #expect(try count("SELECT count(*) FROM baton.events WHERE kind = 'migrated'") == users)
        #expect(try count("SELECT count(DISTINCT old_sub) FROM baton.events WHERE kind = 'migrated'") == users)
        #expect(try count("SELECT count(*) FROM public.users u JOIN baton.transfers t ON t.new_sub = u.apple_sub") == users)
    }
}
