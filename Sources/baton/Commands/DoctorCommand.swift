import BatonCommandLine
import BatonAppleSignIn
import Baton
import BatonReport
import Foundation
import BatonJOSE
import BatonPostgres

/// `baton doctor`: checks a configuration end to end, one line per check, with a fix for each failure.
let doctorCommand = Command(
    name: "doctor",
    summary: "check a configuration end to end: keys, Apple, the transfer window, the database",
    abstract: """
    Loads the configuration (default baton.json, then BATON_* variables) and checks, printing one line each:
      - each team's key file: readable, private to its owner, an EC P-256 PKCS#8 key;
      - each team's client secret: accepted by Apple's /auth/token;
      - team IDs: 10 upper-case letters or digits (a number is App Store Connect's provider ID), one per side;
      - the transfer: its client ID among apple.client_ids, the acceptance date and the days left in the
        60-day window, how long a client secret made for another tool must last;
      - the identity-token key set: reachable, with keys;
      - the database: reachable, Baton's schema migrated, the legacy table and its columns present,
        which rows legacy.where selects and how many, unique indexes on the subject (with the where
        columns) and on the key, where emails are and under which policy, the JSON keys rewritten
        (the same inspection 'baton serve' runs at start-up);
      - who Baton cannot reach: Apple rows without a subject (nor transfer identifier); relay addresses,
        which need the receiving team's email sources registered before any mail; duplicates to merge;
        users Apple refused for good at transfer-ids or at the exchange, by legacy key, with the way out.
    """,
    options: DoctorOptions.self,
    discussion: """
    Lines start with 'ok', 'warn', 'WAIT' or 'FAIL'; warn, WAIT and FAIL lines end with a fix. WAIT is a
    check that can only pass once the transfer is accepted (apple.transfer.accepted_at absent or in the
    future): the recipient's secret, the window; it names what makes it pass and fails nothing.
    Exit status: 0 nothing failed (warn and WAIT lines included), 1 a check failed, 2 the configuration
    is invalid.
    """,
    run: { parsed in
        var doctor = Doctor()
        return await doctor.run(configPath: parsed.config, environment: ProcessInfo.processInfo.environment, now: Date())
    }
)

/// The options of `baton doctor`.
private struct DoctorOptions: CommandOptions {
    let config = Option.config
}

/// Runs the checks and prints their lines.
struct Doctor {
    enum Status: String {
        case ok = "ok  "
        case warning = "warn"
        /// A check that can only pass after the transfer's acceptance, run before it.
        case waiting = "WAIT"
        case failure = "FAIL"
    }

    private(set) var failures = 0
    private(set) var warnings = 0
    private(set) var waiting = 0

    /// Prints one check's line: `ok   name: detail`, or `FAIL name: detail; fix: …`.
    mutating func report(_ status: Status, _ name: String, _ detail: String, fix: String? = nil) {
        var line = "\(status.rawValue)  \(name): \(detail)"
        if let fix, status != .ok { line += "; fix: \(fix)" }
        print(line)
        switch status {
        case .ok: break
        case .warning: warnings += 1
        case .waiting: waiting += 1
        case .failure: failures += 1
        }
    }

    mutating func run(configPath: String?, environment: [String: String], now: Date) async -> Int32 {
        let configuration: BatonConfiguration
        do {
            configuration = try await BatonConfiguration.load(path: configPath, environment: environment, queue: .global())
        } catch let error as ConfigurationError {
            let text = error.description
            report(.failure, "configuration", text.hasPrefix("configuration: ") ? String(text.dropFirst(15)) : text,
                   fix: Doctor.configurationFix(error))
            return 2
        } catch {
            report(.failure, "configuration", "cannot be loaded", fix: "check the file")
            return 2
        }
        report(.ok, "configuration", "\(configPath ?? BatonConfiguration.defaultPath)\(configPath == nil && !FileManager.default.fileExists(atPath: BatonConfiguration.defaultPath) ? " (absent: environment only)" : "")")

        await checkTransfer(configuration, now: now)
        await checkKeySet(configuration.apple.keysURL)
        await checkDatabase(configuration)

        print("doctor: \(failures) failed, \(warnings) warnings\(waiting > 0 ? ", \(waiting) waiting for the acceptance" : "")")
        return failures == 0 ? 0 : 1
    }

    // MARK: - Apple

    private mutating func checkTransfer(_ configuration: BatonConfiguration, now: Date) async {
        guard let transfer = configuration.apple.transfer else {
            report(.warning, "transfer", "none configured (apple.transfer absent): no transfer identifiers can be made or exchanged",
                   fix: "add apple.transfer with the app's client ID and the team's key")
            return
        }
        if !configuration.apple.clientIDs.contains(transfer.clientID) {
            report(.warning, "transfer client ID", "\(transfer.clientID) is not among apple.client_ids, so its users' identity tokens would be refused",
                   fix: "add it to apple.client_ids")
        }
        let sides: [(String, BatonConfiguration.TeamCredentials?)] = [("sender", transfer.sender), ("recipient", transfer.recipient)]
        if sides.allSatisfy({ $0.1 == nil }) {
            report(.warning, "credentials", "neither apple.transfer.sender nor apple.transfer.recipient is configured",
                   fix: "add the key of your side of the transfer")
        }
        var signers: [String: ClientSecret] = [:]
        for (side, credentials) in sides {
            guard let credentials else { continue }
            guard let keyID = credentials.keyID, let keyFile = credentials.privateKeyPath else {
                report(.ok, "\(side) key", "none: team \(credentials.teamID) is named only (its own machine holds its key)")
                continue
            }
            signers[side] = await checkKey(side: side, teamID: credentials.teamID, keyID: keyID, keyFile: keyFile, clientID: transfer.clientID)
        }
        if let sender = signers["sender"], let recipient = signers["recipient"],
           sender.keyID == recipient.keyID || sender.publicKey == recipient.publicKey {
            report(.failure, "credentials", "the sender and the recipient use the same key (\(recipient.keyID)): each team signs with its own",
                   fix: "set apple.transfer.recipient to the receiving team's key ID and .p8 file, and .sender to the sending team's")
        }
        for (side, credentials) in sides {
            guard let signer = signers[side], let keyFile = credentials?.privateKeyPath else { continue }
            let other = side == "sender" ? transfer.recipient : transfer.sender
            await checkToken(side: side, signer: signer, keyFile: keyFile, otherTeamID: other?.teamID,
                             transfer: transfer, baseURL: configuration.apple.baseURL, now: now)
        }
        checkWindow(transfer, now: now)
        checkClientSecrets(transfer, now: now)
    }

    /// The fix for a configuration error: a team ID's usual slips are named.
    static func configurationFix(_ error: ConfigurationError) -> String {
        guard error.key.hasSuffix(".team_id") else { return "correct the key named (see sample-config/README.md)" }
        if error.key.hasSuffix("recipient.team_id") && error.reason.contains("equals the sender's") {
            return "the sender is the team the app leaves, the recipient the team it joins: each side's own ID (Membership details of each developer account)"
        }
        return "a team ID is 10 upper-case letters or digits, under Membership details of the developer account (like A1B2C3D4E5); a number such as 118234567 is App Store Connect's provider ID, not the team ID"
    }

    /// Baton signs a short-lived client secret per token request, so none of its own expires; a secret made with
    /// `baton client-secret` for another tool (at most 180 days) must outlive the window, or that tool stops.
    private mutating func checkClientSecrets(_ transfer: BatonConfiguration.Transfer, now: Date) {
        guard let end = transfer.windowEndsAt, end > now else { return }
        let days = Int((end.timeIntervalSince(now) / 86_400).rounded(.up))
        report(.ok, "client secrets", "Baton signs its own for each token request; a secret made for another tool (at most 180 days) must be valid until \(end.formatted(.iso8601)): made today, 'baton client-secret --days \(days)' or more")
    }

    /// Checks the key file; returns a signer when it is usable.
    private mutating func checkKey(side: String, teamID: String, keyID: String, keyFile path: String, clientID: String) async -> ClientSecret? {
        let name = "\(side) key"
        do {
            let signer = try await ClientSecret.load(teamID: teamID, keyID: keyID, clientID: clientID, keyFile: path)
            report(.ok, name, "\(path): EC P-256, key \(keyID) of team \(teamID)")
            return signer
        } catch let error as AppleClientError {
            let fix: String
            switch error.code {
            case .keyUnreadable: fix = "check apple.transfer.\(side).private_key_path and the file's permissions"
            case .keyExposed: fix = "chmod 600 \(path)"
            default: fix = error.explanation.replacingOccurrences(of: "1. ", with: "")
            }
            report(.failure, name, error.description, fix: fix)
        } catch {
            report(.failure, name, "cannot be loaded", fix: "check apple.transfer.\(side).private_key_path")
        }
        return nil
    }

    /// Asks Apple for an access token with `side`'s credentials; on `invalid_client`, names the likely cause.
    private mutating func checkToken(side: String, signer: ClientSecret, keyFile: String, otherTeamID: String?,
                                     transfer: BatonConfiguration.Transfer, baseURL: URL, now: Date) async {
        do {
            _ = try await Doctor.client(baseURL, signer).accessToken(purpose: side == "sender" ? .transferIdentifier : .exchange)
            report(.ok, "\(side) secret", "accepted by \(baseURL.absoluteString)/auth/token (team \(signer.teamID), client \(signer.clientID))")
        } catch let error as AppleClientError where error.code == .invalidClient {
            let (status, cause, fix) = await Doctor.invalidClientCause(side: side, signer: signer, keyFile: keyFile, otherTeamID: otherTeamID,
                                                                       transfer: transfer, baseURL: baseURL, now: now, error: error)
            report(status, "\(side) secret", "\(error.description); \(status == .waiting ? "" : "likely cause: ")\(cause)", fix: fix)
        } catch let error as AppleClientError {
            report(.failure, "\(side) secret", error.description, fix: Doctor.oneLine(error.explanation))
        } catch {
            report(.failure, "\(side) secret", "the token request failed", fix: "check apple.base_url")
        }
    }

    private static func client(_ baseURL: URL, _ signer: ClientSecret) -> AppleClient {
        AppleClient(baseURL: baseURL, credentials: signer,
                    options: AppleClient.Options(requestTimeout: 10, retry: RetryPolicy(maxAttempts: 2, maxRetryAfter: 5), secretLifetime: 300))
    }

    /// The likely cause of Apple's `invalid_client` to `side`'s token request, among the documented ones
    /// (docs/troubleshooting.md, "the key in the wrong team"), and the line's status: the key is the other team's
    /// (Apple accepts it under the other side's team ID); else, from `accepted_at`, the app is not the recipient's
    /// yet (``Status/waiting``: the check passes only after the acceptance) or no longer the sender's; else Apple's
    /// numbered list.
    private static func invalidClientCause(side: String, signer: ClientSecret, keyFile: String, otherTeamID: String?,
                                           transfer: BatonConfiguration.Transfer, baseURL: URL, now: Date,
                                           error: AppleClientError) async -> (status: Status, cause: String, fix: String) {
        if let otherTeamID, otherTeamID != signer.teamID,
           let probe = try? await ClientSecret.load(teamID: otherTeamID, keyID: signer.keyID, clientID: signer.clientID, keyFile: keyFile),
           (try? await client(baseURL, probe).accessToken()) != nil {
            let otherSide = side == "sender" ? "recipient" : "sender"
            let needs = side == "sender" ? "transfer identifiers need the sender team's key" : "exchanges need the recipient team's key"
            return (.failure, "key \(signer.keyID) is registered to team \(otherTeamID) (the \(otherSide)'s), not to team \(signer.teamID): Apple accepts it under team \(otherTeamID)'s ID",
                    "\(needs): create a Sign in with Apple key in team \(signer.teamID)'s account (Certificates, Identifiers & Profiles > Keys) and set apple.transfer.\(side).key_id and .private_key_path to it")
        }
        let otherCredentials = side == "sender" ? transfer.recipient : transfer.sender
        if let otherCredentials, otherCredentials.keyID == signer.keyID {
            let otherSide = side == "sender" ? "recipient" : "sender"
            return (.failure, "the \(side) is configured with the \(otherSide)'s key \(signer.keyID), which Apple does not accept under team \(signer.teamID)",
                    "set apple.transfer.\(side).key_id and .private_key_path to a Sign in with Apple key of team \(signer.teamID)")
        }
        switch (side, TransferWindow(acceptedAt: transfer.acceptedAt).status(at: now)) {
        case ("recipient", .notAccepted), ("recipient", .notOpenYet):
            return (.waiting, "the app is not transferred to this team yet: Apple gives the recipient a token only once it has accepted the transfer, so this cannot pass before",
                    "passes after team \(signer.teamID) accepts the transfer in App Store Connect: set apple.transfer.accepted_at to that moment and run baton doctor again")
        case ("sender", .closed):
            return (.failure, "the app is no longer this team's: Apple refuses the sending team 60 days after acceptance",
                    "nothing to fix on the sender's side; users not migrated can only be re-linked (docs/runbook.md, \"Missed the window\")")
        default:
            return (.failure, "the key answers under neither team ID, and the window does not explain it", oneLine(error.explanation))
        }
    }

    private mutating func checkWindow(_ transfer: BatonConfiguration.Transfer, now: Date) {
        guard let accepted = transfer.acceptedAt, let end = transfer.windowEndsAt, let days = transfer.daysLeft(now: now) else {
            report(.waiting, "transfer window", "not accepted yet (apple.transfer.accepted_at absent): the 60-day window starts at the acceptance",
                   fix: "passes once the recipient accepts the transfer in App Store Connect and apple.transfer.accepted_at is set to that moment")
            return
        }
        let acceptedText = accepted.formatted(.iso8601)
        let endText = end.formatted(.iso8601)
        if accepted > now {
            report(.waiting, "transfer window", "accepted_at \(acceptedText) is in the future: the window opens then, and baton exchange refuses to start before",
                   fix: "passes at that moment; if the transfer was accepted already, set apple.transfer.accepted_at to when it was")
        } else if end <= now {
            report(.failure, "transfer window", "accepted \(acceptedText); the 60-day window closed at \(endText): transfer identifiers can no longer be exchanged",
                   fix: "users not yet migrated can only be re-linked (POST /v1/link); check accepted_at if the date is wrong")
        } else if days < 7 {
            report(.warning, "transfer window", "accepted \(acceptedText); \(days) days left (closes \(endText))",
                   fix: "run 'baton exchange' now for every pending user")
        } else {
            report(.ok, "transfer window", "accepted \(acceptedText); \(days) days left (closes \(endText))")
        }
    }

    private mutating func checkKeySet(_ url: URL) async {
        do {
            let keySet = try JWKSet(json: try await HTTPKeySetFetcher(url: url, timeout: 10).fetchKeySet())
            if keySet.keys.isEmpty {
                report(.failure, "key set", "\(url.absoluteString) holds no usable key", fix: "check apple.keys_url")
            } else {
                report(.ok, "key set", "\(url.absoluteString): \(keySet.keys.count) keys")
            }
        } catch let error as JOSEError {
            report(.failure, "key set", "\(url.absoluteString) is not a valid key set (\(error.description))", fix: "check apple.keys_url")
        } catch let error as HTTPKeySetFetcher.FetchError {
            report(.failure, "key set", "\(url.absoluteString): \(error.description)", fix: "check apple.keys_url, the network path and proxy")
        } catch {
            report(.failure, "key set", "\(url.absoluteString) is unreachable", fix: "check apple.keys_url, the network path and proxy")
        }
    }

    // MARK: - Database

    /// What `body` returns; nil, after a FAIL line `name: detail(error); fix: fix`, when it throws.
    private mutating func attempt<Value>(_ name: String, _ detail: (any Error) -> String, fix: String, _ body: () async throws -> Value) async -> Value? {
        do {
            return try await body()
        } catch {
            report(.failure, name, detail(error), fix: fix)
            return nil
        }
    }

    private mutating func checkDatabase(_ configuration: BatonConfiguration) async {
        let pool = configuration.database.pool(maxConnections: 1)
        await checkDatabase(configuration, pool: pool)
        await pool.close()
    }

    private mutating func checkDatabase(_ configuration: BatonConfiguration, pool: PostgresPool) async {
        do {
            let row = try await pool.query("SELECT current_database(), current_setting('server_version')")
            let name = try row[0].decode(String.self, at: 0)
            let version = try row[0].decode(String.self, at: 1)
            report(.ok, "database", "connected to \(name) (PostgreSQL \(version))")
        } catch {
            report(.failure, "database", "cannot connect (\(Doctor.describe(error)))",
                   fix: "check database.url (BATON_DATABASE_URL), that the server runs and accepts this user")
            return
        }
        do {
            let migrator = try BatonSchema.migrator()
            let pending = try await migrator.pending(pool)
            if pending.isEmpty {
                let count = migrator.migrations.count
                report(.ok, "schema", "Baton's schema is migrated (\(count) migration\(count == 1 ? "" : "s"))")
            } else {
                report(.failure, "schema", "\(pending.count) of \(migrator.migrations.count) migrations not applied",
                       fix: "run 'baton db migrate'")
            }
        } catch {
            report(.failure, "schema", "cannot read Baton's migrations (\(Doctor.describe(error)))", fix: "run 'baton db migrate'")
        }
        await checkLegacyTable(configuration.legacy, pool: pool)
    }

    private mutating func checkLegacyTable(_ legacy: BatonConfiguration.Legacy, pool: PostgresPool) async {
        guard let identifiers = await attempt("legacy table", { "\($0)" }, fix: "correct the legacy section", { try legacy.identifiers() }) else { return }
        let store = LegacyStore(pool: pool, legacy: identifiers)
        guard let inspection = await attempt("legacy table", { "cannot inspect \(legacy.table) (\(Doctor.describe($0)))" },
                                             fix: "grant this user SELECT on the table", { try await store.inspectLegacyTable() }) else { return }
        // The same inspection the engine runs at start-up (the schema was checked above, migration by migration).
        for finding in inspection.findings where finding.name != "schema" {
            let status: Status = switch finding.status {
            case .ok: .ok
            case .warning: .warning
            case .failure: .failure
            }
            report(status, finding.name, finding.detail, fix: finding.fix)
        }
        if inspection.failure == nil {
            await checkReach(store)
            await checkRefused(pool: pool, legacy: identifiers)
        }
    }

    /// The users refused for good at each bulk step: named until they are retried, re-linked or reached by email.
    private mutating func checkRefused(pool: PostgresPool, legacy: BatonConfiguration.LegacyIdentifiers) async {
        for step in MigrationReport.Step.allCases {
            guard let refused = await attempt("refused at \(step.rawValue)", { "cannot read the refused users (\(Doctor.describe($0)))" },
                                              fix: "run 'baton db migrate'", { try await RefusedUsers.read(pool: pool, step: step, legacy: legacy) }) else { return }
            guard refused.count > 0 else { continue }
            report(.warning, "refused at \(step.rawValue)", refused.summary, fix: refused.advice)
        }
    }

    /// Who Baton cannot reach, the relay addresses' email sources, and the duplicates waiting for a merge.
    private mutating func checkReach(_ store: LegacyStore) async {
        guard let reach = await attempt("reach", { "cannot count the Apple rows (\(Doctor.describe($0)))" },
                                        fix: "run 'baton db migrate' and grant this user SELECT on the table", { try await store.reach() }) else { return }
        let lost = "\(reach.unreachable) of \(reach.appleRows) Apple rows have no Apple subject\(store.legacy.transferColumn == nil ? "" : " nor transfer identifier")"
        let only = "no sign-in or exchange can find them: POST /v1/link (a sending-team token) or re-verifying their email is their only way"
        if reach.unreachable * 2 > reach.appleRows {
            report(.warning, "apple subjects", "\(lost): \(only)",
                   fix: "fill the subject column from the sending team's data (or legacy.transfer_column between companies) before the window closes, else plan a re-link campaign")
        } else if reach.unreachable > 0 {
            report(.ok, "apple subjects", "\(lost): \(only)")
        }
        if reach.relayEmails > 0 {
            report(.warning, "relay email", "\(reach.relayEmails) users have a private relay address (@privaterelay.appleid.com): mail to them bounces ('550 5.1.1 bad mailbox name', 'unauthorized sender') until the receiving team registers its own email sources",
                   fix: "before mailing anyone, register the receiving team's sending domains and addresses (SPF, DKIM) under Sign in with Apple for Email Communication in its developer account")
        }
        if reach.unmergedDuplicates > 0 {
            report(.warning, "duplicates", "\(reach.unmergedDuplicates) users have a second record under the new identifier (a sign-in past Baton after acceptance)",
                   fix: "baton merge --dry-run, then baton merge --yes (docs/runbook.md, \"Arriving after acceptance\")")
        }
    }

    /// An error's description: `PostgresError`s say what failed without values or passwords.
    static func describe(_ error: any Error) -> String {
        (error as? PostgresError)?.description ?? "\(type(of: error))"
    }

    /// A numbered explanation on one line.
    static func oneLine(_ explanation: String) -> String {
        explanation.split(separator: "\n").joined(separator: " ")
    }
}
