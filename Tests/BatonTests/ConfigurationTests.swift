import BatonAppleSignIn
import Baton
import Foundation
import TestSupport
import Testing

/// A complete, valid configuration as JSON text, with `edit` applied to its tree first.
private func configJSON(_ edit: (inout [String: Any]) -> Void = { _ in }) throws -> Data {
    var tree: [String: Any] = [
        "database": ["url": "postgresql://baton@db.internal/app"],
        "apple": [
            "client_ids": ["com.example.app", "com.example.web"],
            "transfer": [
                "client_id": "com.example.app",
                "sender": ["team_id": "AAAAAAAAAA", "key_id": "KEYA000001", "private_key_path": "keys/sender.p8"],
                "recipient": ["team_id": "BBBBBBBBBB", "key_id": "KEYB000001", "private_key_path": "/etc/baton/recipient.p8"],
            ] as [String: Any],
        ] as [String: Any],
        "legacy": ["table": "public.users", "key_column": "id", "subject_column": "apple_sub", "email_column": "email"],
    ]
    edit(&tree)
    return try JSONSerialization.data(withJSONObject: tree)
}

private func load(_ json: Data, _ environment: [String: String] = [:]) throws -> BatonConfiguration {
    try BatonConfiguration.load(json: json, baseDirectory: "/srv/baton", environment: environment)
}

/// Sets `value` at a dotted path of a JSON tree (nil removes it).
private func set(_ tree: inout [String: Any], _ path: String, _ value: Any?) {
    var parts = path.split(separator: ".").map(String.init)
    let last = parts.removeLast()
    func walk(_ object: inout [String: Any], _ index: Int) {
        if index == parts.count {
            object[last] = value
            return
        }
        var child = object[parts[index]] as? [String: Any] ?? [:]
        walk(&child, index + 1)
        object[parts[index]] = child
    }
    walk(&tree, 0)
}

@Suite("Configuration")
struct ConfigurationTests {
    @Test("defaults are applied to a minimal file")
    func defaults() throws {
        let configuration = try load(try configJSON())
        #expect(configuration.listen == .init(host: "127.0.0.1", port: 8080))
        #expect(configuration.database.poolSize == 8)
        #expect(configuration.apple.baseURL.absoluteString == "https://appleid.apple.com")
        #expect(configuration.apple.keysURL.absoluteString == "https://appleid.apple.com/auth/keys")
        #expect(configuration.apple.issuer == "https://appleid.apple.com")
        #expect(configuration.apple.legacyClientIDs == [])
        #expect(configuration.apple.transfer?.acceptedAt == nil)
        #expect(configuration.legacy.transferColumn == nil)
        #expect(configuration.adminToken == nil)
        #expect(configuration.server.eventLoops == nil)
        #expect(configuration.server.batchScheduling)
    }

    @Test("relative key paths in the file are resolved against its directory")
    func relativePaths() throws {
        let configuration = try load(try configJSON())
        #expect(configuration.apple.transfer?.sender?.privateKeyPath == "/srv/baton/keys/sender.p8")
        #expect(configuration.apple.transfer?.recipient?.privateKeyPath == "/etc/baton/recipient.p8")
    }

    @Test("keys_url follows base_url, keeping its path")
    func keysURLFollowsBaseURL() throws {
        let configuration = try load(try configJSON { set(&$0, "apple.base_url", "http://127.0.0.1:4567/apple") })
        #expect(configuration.apple.keysURL.absoluteString == "http://127.0.0.1:4567/apple/auth/keys")
    }

    @Test("the environment overrides each kind of key")
    func environmentOverrides() throws {
        let configuration = try load(try configJSON(), [
            "BATON_DATABASE_URL": "postgresql://other@db2/app",
            "BATON_DATABASE_POOL_SIZE": "3",
            "BATON_DATABASE_STATEMENT_TIMEOUT_MS": "2500",
            "BATON_APPLE_BASE_URL": "http://127.0.0.1:9999",
            "BATON_APPLE_CLIENT_IDS": " com.a.app , com.a.web,",
            "BATON_APPLE_TRANSFER_ACCEPTED_AT": "2026-11-01T00:00:00Z",
            "BATON_APPLE_TRANSFER_SENDER_PRIVATE_KEY_PATH": "relative/sender.p8",
            "BATON_LEGACY_TRANSFER_COLUMN": "transfer_sub",
            "BATON_LISTEN": "[::1]:0",
            "BATON_SERVER_BATCH_SCHEDULING": "false",
        ])
        #expect(configuration.database.url == "postgresql://other@db2/app")
        #expect(configuration.database.poolSize == 3)
        #expect(configuration.database.statementTimeoutMilliseconds == 2500)
        #expect(configuration.apple.keysURL.absoluteString == "http://127.0.0.1:9999/auth/keys")
        #expect(configuration.apple.clientIDs == ["com.a.app", "com.a.web"])
        #expect(configuration.apple.transfer?.acceptedAt == Date(timeIntervalSince1970: 1_793_491_200))
        #expect(configuration.apple.transfer?.sender?.privateKeyPath == "relative/sender.p8")
        #expect(configuration.legacy.transferColumn == "transfer_sub")
        #expect(configuration.listen == .init(host: "::1", port: 0))
        #expect(configuration.listen.description == "[::1]:0")
        #expect(!configuration.server.batchScheduling)
    }

    @Test("an empty variable removes an optional key")
    func emptyVariableRemoves() throws {
        let configuration = try load(try configJSON { set(&$0, "legacy.transfer_column", "transfer_sub") }, ["BATON_LEGACY_TRANSFER_COLUMN": ""])
        #expect(configuration.legacy.transferColumn == nil)
    }

    @Test("a configuration can come from the environment alone")
    func environmentOnly() throws {
        let configuration = try load(Data("{}".utf8), [
            "BATON_DATABASE_URL": "postgresql:///app?host=/tmp",
            "BATON_APPLE_CLIENT_IDS": "com.example.app",
            "BATON_APPLE_TRANSFER_CLIENT_ID": "com.example.app",
            "BATON_APPLE_TRANSFER_RECIPIENT_TEAM_ID": "BBBBBBBBBB",
            "BATON_APPLE_TRANSFER_RECIPIENT_KEY_ID": "KEYB000001",
            "BATON_APPLE_TRANSFER_RECIPIENT_PRIVATE_KEY_PATH": "/keys/r.p8",
            "BATON_LEGACY_TABLE": "users",
            "BATON_LEGACY_KEY_COLUMN": "id",
            "BATON_LEGACY_SUBJECT_COLUMN": "sub",
            "BATON_LEGACY_EMAIL_COLUMN": "email",
        ])
        #expect(configuration.apple.transfer?.recipient?.teamID == "BBBBBBBBBB")
        #expect(configuration.apple.transfer?.sender == nil)
        #expect(try configuration.legacy.quotedTable() == "\"users\"")
    }

    @Test("the admin token comes from the environment or its file, never the JSON")
    func adminToken() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("baton-config-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let tokenPath = directory.appendingPathComponent("admin-token").path
        try Data("file-token-0123456789\n".utf8).write(to: URL(fileURLWithPath: tokenPath))
        let json = try configJSON { $0["admin_token_file"] = "admin-token" }
        // A token file others may read is refused at start-up, not only warned about.
        try FileManager.default.setAttributes([.posixPermissions: 0o640], ofItemAtPath: tokenPath)
        let exposed = #expect(throws: ConfigurationError.self) { try BatonConfiguration.load(json: json, baseDirectory: directory.path, environment: [:]) }
        #expect(exposed?.key == "admin_token_file")
        try FileManager.default.setAttributes([.posixPermissions: 0o600], ofItemAtPath: tokenPath)

        let fromFile = try BatonConfiguration.load(json: json, baseDirectory: directory.path, environment: [:])
        #expect(fromFile.adminToken?.matches("file-token-0123456789") == true)
        #expect(fromFile.adminToken?.matches("file-token-012345678") == false)
        #expect(fromFile.adminToken?.matches("file-token-01234567890") == false)
        #expect(String(describing: fromFile).contains("file-token") == false)

        let fromEnvironment = try BatonConfiguration.load(json: json, baseDirectory: directory.path, environment: ["BATON_ADMIN_TOKEN": "env-token-0123456789"])
        #expect(fromEnvironment.adminToken?.matches("env-token-0123456789") == true)

        let inJSON = #expect(throws: ConfigurationError.self) { try load(try configJSON { $0["admin_token"] = "json-token-0123456789" }) }
        #expect(inJSON?.code == .unknownKey)
        #expect(inJSON?.key == "admin_token")
        #expect(inJSON?.description.contains("json-token") == false)

        let short = #expect(throws: ConfigurationError.self) { try load(try configJSON(), ["BATON_ADMIN_TOKEN": "short"]) }
        #expect(short?.code == .invalidValue)

        let missingFile = #expect(throws: ConfigurationError.self) { try load(try configJSON { $0["admin_token_file"] = "nope" }) }
        #expect(missingFile?.code == .fileUnreadable)
        #expect(missingFile?.key == "admin_token_file")
    }

    /// One bad value per row: the edit, and the key and code the error must name.
    static var invalid: [(String, String, Any?, ConfigurationError.Code)] { [
        ("missing database", "database", nil, .missing),
        ("missing database.url", "database.url", nil, .missing),
        ("database URL scheme", "database.url", "mysql://db/app", .invalidValue),
        ("pool size zero", "database.pool_size", 0, .invalidValue),
        ("pool size text", "database.pool_size", "eight", .invalidValue),
        ("statement timeout negative", "database.statement_timeout_ms", -1, .invalidValue),
        ("statement timeout over an hour", "database.statement_timeout_ms", 3_600_001, .invalidValue),
        ("listen without port", "listen", "127.0.0.1", .invalidValue),
        ("listen port range", "listen", "127.0.0.1:70000", .invalidValue),
        ("base URL scheme", "apple.base_url", "ftp://appleid.apple.com", .invalidValue),
        ("keys URL without host", "apple.keys_url", "https:///auth/keys", .invalidValue),
        ("issuer not a URL", "apple.issuer", "appleid", .invalidValue),
        ("no client IDs", "apple.client_ids", [String](), .missing),
        ("client IDs not a list", "apple.client_ids", "com.example.app", .invalidValue),
        ("client ID with team prefix", "apple.client_ids", ["com.example.web", "A1B2C3D4E5.com.example.app"], .invalidValue),
        ("empty client ID", "apple.client_ids", [""], .invalidValue),
        ("client ID listed twice", "apple.client_ids", ["com.example.app", "com.example.app"], .invalidValue),
        ("legacy client ID with space", "apple.legacy_client_ids", ["com.example app"], .invalidValue),
        ("legacy client ID also current", "apple.legacy_client_ids", ["com.example.old", "com.example.web"], .invalidValue),
        ("plain http to a remote Apple", "apple.base_url", "http://appleid.apple.com", .invalidValue),
        ("plain http keys URL to a remote host", "apple.keys_url", "http://10.0.0.1:8080/auth/keys", .invalidValue),
        ("notification max age too short", "apple.notification_max_age_seconds", 10, .invalidValue),
        ("request timeout zero", "server.request_timeout_ms", 0, .invalidValue),
        ("request head timeout too long", "server.request_head_timeout_ms", 600_001, .invalidValue),
        ("no connection per address", "server.connections_per_ip", 0, .invalidValue),
        ("no event loop", "server.event_loops", 0, .invalidValue),
        ("require_nonce not a boolean", "require_nonce", "yes", .invalidValue),
        ("batch_scheduling not a boolean", "server.batch_scheduling", 1, .invalidValue),
        ("transfer client ID with team prefix", "apple.transfer.client_id", "AAAAAAAAAA.com.example.app", .invalidValue),
        ("transfer without client ID", "apple.transfer.client_id", nil, .missing),
        ("accepted_at not a date", "apple.transfer.accepted_at", "1 November 2026", .invalidValue),
        ("accepted_at without zone", "apple.transfer.accepted_at", "2026-11-01T00:00:00", .invalidValue),
        ("team ID lower case", "apple.transfer.sender.team_id", "aaaaaaaaaa", .invalidValue),
        ("team ID too short", "apple.transfer.sender.team_id", "AAAAAAAAA", .invalidValue),
        ("same team on both sides", "apple.transfer.recipient.team_id", "AAAAAAAAAA", .invalidValue),
        ("key ID too long", "apple.transfer.recipient.key_id", "KEYB0000011", .invalidValue),
        ("key ID with punctuation", "apple.transfer.sender.key_id", "KEYA-00001", .invalidValue),
        ("empty key path", "apple.transfer.sender.private_key_path", "", .missing),
        ("table with quote", "legacy.table", "users\"; DROP TABLE x; --", .invalidValue),
        ("table with two dots", "legacy.table", "a.b.c", .invalidValue),
        ("table starting with a digit", "legacy.table", "1users", .invalidValue),
        ("column with schema", "legacy.key_column", "public.id", .invalidValue),
        ("column too long", "legacy.subject_column", String(repeating: "s", count: 64), .invalidValue),
        ("email column equals subject column", "legacy.email_column", "apple_sub", .invalidValue),
        ("transfer column equals email column", "legacy.transfer_column", "email", .invalidValue),
        ("on_duplicate unknown", "legacy.on_duplicate", "delete", .invalidValue),
        ("created_at column with quote", "legacy.created_at_column", "created\"at", .invalidValue),
        ("unknown top-level key", "databse", ["url": "x"], .unknownKey),
        ("unknown nested key", "apple.transfer.sendr", ["team_id": "AAAAAAAAAA"], .unknownKey),
        ("unknown member of an email copy", "legacy.email_copies", [["table": "public.emailaddress", "column": "email", "user_column": "id", "user_colum": "x"]], .unknownKey),
        ("email copy without its user column", "legacy.email_copies", [["table": "public.emailaddress", "column": "email"]], .missing),
        ("email copy on the legacy table", "legacy.email_copies", [["table": "public.users", "column": "email", "user_column": "id"]], .invalidValue),
        ("email copies not a list", "legacy.email_copies", ["table": "public.emailaddress"], .invalidValue),
    ] }

    @Test("each bad value is refused with an error naming its key", arguments: invalid.indices)
    func invalidValues(_ index: Int) throws {
        let (_, path, value, code) = Self.invalid[index]
        let json = try configJSON { set(&$0, path, value) }
        let error = #expect(throws: ConfigurationError.self) { try load(json) }
        #expect(error?.code == code)
        #expect(error?.key.hasPrefix(path) == true, "\(String(describing: error)) should name \(path)")
        if code == .unknownKey {
            #expect(error?.environmentVariable == nil)
        } else {
            #expect(error?.description.contains(BatonConfiguration.environmentVariable(for: path)) == true, "\(String(describing: error))")
        }
    }

    @Test("an unknown key close to a declared one is answered with it: did you mean …?")
    func didYouMean() throws {
        let cases: [(String, Any, String?)] = [
            ("databse", ["url": "x"], "database"), ("apple.transfer.sendr", ["team_id": "AAAAAAAAAA"], "apple.transfer.sender"),
            ("legacy.email_colum", "email", "legacy.email_column"), ("legacy.onduplicate", "merge", "legacy.on_duplicate"),
            ("legacy.zzzzzzzzzz", "x", nil),
        ]
        for (path, value, meant) in cases {
            let json = try configJSON { set(&$0, path, value) }
            let error = #expect(throws: ConfigurationError.self) { try load(json) }
            #expect(error?.code == .unknownKey)
            if let meant {
                #expect(error?.reason == "unknown key; did you mean \(meant)?", "\(String(describing: error))")
            } else {
                #expect(error?.reason == "unknown key (a typo?)", "\(String(describing: error))")
            }
        }
    }

    @Test("legacy.email_copies from the environment: a JSON array of objects, its members checked as in the file")
    func emailCopiesFromEnvironment() throws {
        let variable = BatonConfiguration.environmentVariable(for: "legacy.email_copies")
        let configuration = try load(try configJSON(), [variable: #"[{"table": "public.emailaddress", "column": "email", "user_column": "id", "where": {"kind": "login"}}]"#])
        #expect(configuration.legacy.emailCopies == [LegacyEmailCopy(table: "public.emailaddress", column: "email", userColumn: "id", filters: ["kind": "login"])])
        #expect(try configuration.legacy.identifiers().emailCopies.map(\.table.description) == ["public.emailaddress"])
        for (text, code) in [("public.emailaddress", ConfigurationError.Code.invalidValue), (#"[{"table": "public.e", "colum": "email"}]"#, .unknownKey)] {
            let error = #expect(throws: ConfigurationError.self) { try load(try configJSON(), [variable: text]) }
            #expect(error?.code == code && error?.key.hasPrefix("legacy.email_copies") == true, "\(String(describing: error))")
        }
    }

    @Test("a key's range is one text: the error's reason and the end of its documentation line", arguments: [
        ("server.request_timeout_ms", 99, 100, "must be from 100 to 600000 (milliseconds)"),
        ("database.statement_timeout_ms", 3_600_001, 0, "must be from 0 (none) to 3600000 (milliseconds)"),
        ("report_refresh_seconds", 9, 0, "must be 0 (no reload) or from 10 to 86400 (seconds)"),
        ("server.event_loops", 65, 64, "must be from 1 to 64"),
    ])
    func rangeDeclaredOnce(_ path: String, _ value: Int, _ accepted: Int, _ rule: String) throws {
        let error = #expect(throws: ConfigurationError.self) { try load(try configJSON { set(&$0, path, value) }) }
        #expect(error == ConfigurationError(.invalidValue, key: path, reason: rule))
        let key = try #require(BatonConfiguration.keys.first { $0.path == path })
        #expect(key.summary.hasSuffix("; " + rule))
        _ = try load(try configJSON { set(&$0, path, accepted) })
    }

    @Test("an absent or null key takes its declared default; a section of defaults may be left out whole")
    func nullTakesDefault() throws {
        let configuration = try load(try configJSON {
            set(&$0, "database.pool_size", NSNull())
            set(&$0, "listen", NSNull())
            $0["server"] = nil
        })
        #expect(configuration.database.poolSize == BatonConfiguration.Database(url: "x").poolSize)
        #expect(configuration.listen == BatonConfiguration.ListenAddress(host: "127.0.0.1", port: 8080))
        #expect(configuration.server == BatonConfiguration.Server())
    }

    @Test("a missing section names the variables of its required keys")
    func missingSection() throws {
        let error = #expect(throws: ConfigurationError.self) { try load(try configJSON { $0["legacy"] = nil }) }
        #expect(error?.description == "configuration: legacy: missing section: set legacy.table (BATON_LEGACY_TABLE), legacy.key_column (BATON_LEGACY_KEY_COLUMN), legacy.subject_column (BATON_LEGACY_SUBJECT_COLUMN)")
        let empty = #expect(throws: ConfigurationError.self) { try load(Data("{}".utf8)) }
        #expect(empty?.description == "configuration: database: missing section: set database.url (BATON_DATABASE_URL)")
    }

    @Test("a bad environment value names its variable")
    func invalidEnvironment() throws {
        let error = #expect(throws: ConfigurationError.self) { try load(try configJSON(), ["BATON_DATABASE_POOL_SIZE": "many"]) }
        #expect(error?.key == "database.pool_size")
        #expect(error?.description.contains("BATON_DATABASE_POOL_SIZE") == true)
    }

    @Test("errors never quote the value, which may be a secret")
    func errorsHideValues() throws {
        let error = #expect(throws: ConfigurationError.self) {
            try load(try configJSON(), ["BATON_DATABASE_URL": "mysql://admin:hunter2@db/app"])
        }
        #expect(error?.key == "database.url")
        #expect(error?.description.contains("hunter2") == false)
    }

    @Test("malformed files are refused", arguments: ["", "[]", "{\"database\": ", "{\"listen\": 8080}"])
    func malformedFiles(_ text: String) throws {
        #expect(throws: ConfigurationError.self) { try load(Data(text.utf8)) }
    }

    @Test("an explicit file must exist; the default one may be absent")
    func fileMustExist() throws {
        let error = #expect(throws: ConfigurationError.self) {
            try BatonConfiguration.load(path: "/nonexistent/baton.json", environment: [:])
        }
        #expect(error?.code == .fileUnreadable)
    }

    @Test("the sample configuration loads, and docs/configuration.md lists every key and variable")
    func sample() async throws {
        let path = packageRoot.appendingPathComponent("sample-config/baton.json").path
        let configuration = try BatonConfiguration.load(path: path, environment: ["BATON_ADMIN_TOKEN": "sample-admin-token-123"])
        let viaQueue = try await BatonConfiguration.load(path: path, environment: ["BATON_ADMIN_TOKEN": "sample-admin-token-123"], queue: .global())
        #expect(viaQueue == configuration)
        #expect(configuration.apple.transfer?.acceptedAt != nil)
        // A client ID that moved with the app (its Services IDs included) signs in under team B: never a legacy one.
        #expect(Set(configuration.apple.legacyClientIDs).isDisjoint(with: configuration.apple.clientIDs))
        #expect(configuration.apple.transfer?.sender?.privateKeyPath == packageRoot.appendingPathComponent("sample-config/keys/sender.p8").path)
        #expect(try configuration.legacy.quotedTable() == "\"public\".\"users\"")

    }

    @Test("docs/configuration.md's key table is the declared keys, one row each in file order, and nothing else")
    func documentedKeys() throws {
        let docs = try String(contentsOf: packageRoot.appendingPathComponent("docs/configuration.md"), encoding: .utf8)
        let section = try #require(docs.components(separatedBy: "\n## Keys\n").dropFirst().first)
        let table = section.split(separator: "\n", omittingEmptySubsequences: false).drop { !$0.hasPrefix("|") }
            .prefix { $0.hasPrefix("|") }.dropFirst(2).map(String.init)
        // The tokens themselves have a variable but no key: their rows start with `—`.
        let tokens = table.filter { $0.hasPrefix("| — |") }
        #expect(tokens.count == 2 && tokens[0].contains(BatonConfiguration.adminTokenVariable) && tokens[1].contains(BatonConfiguration.serviceTokenVariable))
        let expected = BatonConfiguration.keys.map { "| `\($0.path)` | `\($0.environmentVariable)` | \($0.defaultDescription) | \($0.summary) |" }
        let rows = table.filter { !$0.hasPrefix("| — |") }
        for row in expected where !rows.contains(row) { Issue.record("docs/configuration.md lacks the row \(row)") }
        for row in rows where !expected.contains(row) { Issue.record("docs/configuration.md has a row for no declared key: \(row)") }
        #expect(rows == expected, "the rows are not in the declared order")
    }

    @Test("the key list and the encoded configuration name the same keys")
    func keyListMatchesEncoding() throws {
        var full = try load(try configJSON())
        full.database.statementTimeoutMilliseconds = 1_000
        full.apple.transfer?.acceptedAt = Date(timeIntervalSince1970: 1_793_491_200)
        full.legacy.transferColumn = "transfer_id"
        full.adminTokenFile = "/etc/baton/admin-token"
        full.serviceTokenFile = "/etc/baton/service-token"
        full.legacy.filters = ["provider": "apple"]
        full.legacy.email = LegacyEmailTable(table: "public.auth_user", column: "email", keyColumn: "id", referenceColumn: "user_id")
        full.legacy.json = LegacyJSONCopy(column: "extra_data", subjectKeys: ["sub"], emailKeys: ["email"], emailTableColumn: "meta")
        full.legacy.emailPolicy = .relay
        full.legacy.onDuplicate = .merge
        full.legacy.createdAtColumn = "created_at"
        full.legacy.subjectFormat = "apple:{sub}"
        full.legacy.emailCopies = [LegacyEmailCopy(table: "public.account_emailaddress", column: "email", userColumn: "user_id", filters: ["kind": "x"])]
        full.legacy.subjectPath = ["apple", "userId"]
        full.legacy.subjectCopies = [LegacySubjectCopy(column: "config", path: ["subject"], table: "public.credentials", keyColumn: "id",
                                                       referenceColumn: "credential_id", filters: ["kind": "oidc"])]
        full.server.eventLoops = 2
        full.jobs.maxActiveBackends = 8
        full.legacy.emailDerived = ["email_lower": .lower]
        full.legacy.email?.derived = ["email_constraint": .same]
        full.legacy.emailCopies?[0].path = ["email"]
        full.legacy.emailCopies?[0].derived = ["lower_email": .lower]
        let encoder = JSONEncoder()
        encoder.dateEncodingStrategy = .iso8601
        let tree = try #require(try JSONSerialization.jsonObject(with: encoder.encode(full)) as? [String: Any])
        func leaves(_ object: [String: Any], _ prefix: String) -> [String] {
            object.flatMap { name, value -> [String] in
                let path = prefix.isEmpty ? name : "\(prefix).\(name)"
                // `legacy.where` is one key whose value is an object of column filters, and so is each copy's `where`
                // (and each `derived`, of column forms);
                // a list of objects is a key and its members (`legacy.email_copies[].table`).
                if let items = value as? [[String: Any]], let first = items.first { return [path] + leaves(first, path + "[]") }
                guard let child = value as? [String: Any], !path.hasSuffix("where"), !path.hasSuffix("derived") else { return [path] }
                return leaves(child, path)
            }
        }
        #expect(Set(leaves(tree, "")) == Set(BatonConfiguration.keys.map(\.path)))
    }

    @Test("a configuration round-trips through JSON without its admin token")
    func roundTrip() throws {
        let original = try load(try configJSON { set(&$0, "apple.transfer.accepted_at", "2026-11-01T00:00:00Z") }, ["BATON_ADMIN_TOKEN": "round-trip-token-0123"])
        let encoder = JSONEncoder()
        encoder.dateEncodingStrategy = .iso8601
        let data = try encoder.encode(original)
        #expect(String(decoding: data, as: UTF8.self).contains("round-trip-token") == false)
        var reloaded = try load(data, ["BATON_ADMIN_TOKEN": "round-trip-token-0123"])
        reloaded.adminToken = original.adminToken
        #expect(reloaded == original)
    }

    @Test("days left in the 60-day window")
    func windowDays() throws {
        let accepted = Date(timeIntervalSince1970: 1_793_491_200)
        let transfer = BatonConfiguration.Transfer(clientID: "com.example.app", acceptedAt: accepted)
        #expect(transfer.daysLeft(now: accepted) == 60)
        #expect(transfer.daysLeft(now: accepted.addingTimeInterval(86_400 * 59.5)) == 0)
        #expect(transfer.daysLeft(now: accepted.addingTimeInterval(86_400 * 10 + 1)) == 49)
        #expect(transfer.daysLeft(now: accepted.addingTimeInterval(86_400 * 61)) == 0)
        #expect(BatonConfiguration.Transfer(clientID: "com.example.app").daysLeft(now: accepted) == nil)
    }
}

@Suite("Configuration → AppleClient")
struct ConfigurationAppleClientTests {
    @Test("each side's client uses that side's key and the transfer's client ID")
    func clientPerSide() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("baton-side-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let generated = try runProcess("/usr/bin/openssl", ["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", directory.appendingPathComponent("recipient.p8").path])
        try #require(generated.status == 0)
        let configuration = try BatonConfiguration.load(json: try configJSON { set(&$0, "apple.transfer.recipient.private_key_path", "recipient.p8") }, baseDirectory: directory.path, environment: [:])

        let recipient = try await configuration.appleClient(for: .recipient)
        #expect(recipient.teamID == "BBBBBBBBBB")
        #expect(recipient.clientID == "com.example.app")
        #expect(recipient.baseURL.absoluteString == "https://appleid.apple.com")

        let missingKey = await #expect(throws: AppleClientError.self) { try await configuration.appleClient(for: .sender) }
        #expect(missingKey?.code == .keyUnreadable)

        var noSender = configuration
        noSender.apple.transfer?.sender = nil
        let notConfigured = await #expect(throws: ConfigurationError.self) { try await noSender.appleClient(for: .sender) }
        #expect(notConfigured?.key == "apple.transfer.sender")
    }
}

@Suite("Configuration identifiers")
struct ConfigurationIdentifierTests {
    @Test("valid identifiers are quoted part by part")
    func quoting() throws {
        #expect(try BatonConfiguration.quoteIdentifier("public.users", key: "legacy.table", allowSchema: true) == "\"public\".\"users\"")
        #expect(try BatonConfiguration.quoteIdentifier("Users", key: "legacy.table", allowSchema: false) == "\"Users\"")
        #expect(try BatonConfiguration.quoteIdentifier("_a1", key: "legacy.key_column", allowSchema: false) == "\"_a1\"")
        #expect(try BatonConfiguration.quoteIdentifier(String(repeating: "a", count: 63), key: "legacy.key_column", allowSchema: false).count == 65)
    }

    @Test("invalid identifiers are refused, naming the key", arguments: [
        "", ".", "a.", ".a", "a b", "a-b", "1a", "a\"b", "é", "a;b", String(repeating: "a", count: 64), "a.b.c",
    ])
    func invalid(_ text: String) {
        let error = #expect(throws: ConfigurationError.self) { try BatonConfiguration.quoteIdentifier(text, key: "legacy.table", allowSchema: true) }
        #expect(error?.key == "legacy.table")
    }

    @Test("a schema prefix is refused where not allowed")
    func schemaNotAllowed() {
        #expect(throws: ConfigurationError.self) { try BatonConfiguration.quoteIdentifier("public.users", key: "legacy.key_column", allowSchema: false) }
    }

    @Test("the legacy identifiers are ready for queries")
    func legacyIdentifiers() throws {
        let legacy = BatonConfiguration.Legacy(table: "app.users", keyColumn: "id", subjectColumn: "apple_sub", emailColumn: "email", transferColumn: "transfer_sub")
        let identifiers = try legacy.identifiers()
        #expect(identifiers.table.quoted == "\"app\".\"users\"")
        #expect(identifiers.subjectColumn.quoted == "\"apple_sub\"")
        #expect(identifiers.transferColumn?.quoted == "\"transfer_sub\"")
    }
}
