import Foundation
import BatonJSON

extension BatonConfiguration {
    /// The kind of value a key holds, which decides how its environment variable is read.
    public enum KeyKind: Sendable, Equatable {
        /// Text.
        case string
        /// A whole number.
        case integer
        /// A list: comma-separated in the environment.
        case list
        /// A file path: relative to the JSON file's directory, or to the current directory from the environment.
        case path
        /// Column → condition filters: `provider=apple,kind=oauth` (equalities) or a JSON object in the environment.
        case filters
        /// `true` or `false` (also `1` and `0` in the environment).
        case boolean
        /// A list of objects whose members are declared as keys `path[].member`: a JSON array in the environment.
        case records
        /// A location in a JSON document: a JSON array of keys and one-member objects (`legacy.subject_path`).
        case jsonPath
    }

    /// What an absent key means.
    public enum KeyDefault: Sendable, Equatable {
        /// The key must be present once its section is (`apple.transfer` and its sides are optional sections).
        case required
        /// The key may stay absent; the text says what that means, for the documentation.
        case absent(String)
        /// An absent (or `null`) key takes a default, which the text states.
        case value(String)
    }

    /// One configuration key: its path in the JSON file, the kind of value it holds, its default and its meaning.
    ///
    /// ``BatonConfiguration/keys`` lists them, made from each section's declaration of its members (the property,
    /// name, default, rule and meaning of each, in `ConfigurationKeys.swift`), which also decode, default and check
    /// the values. The loader reads the list to refuse unknown keys, to apply `BATON_*` variables and to resolve
    /// relative paths; errors name a key's variable through it; `docs/configuration.md` has one row per key,
    /// checked against it by the tests.
    public struct Key: Sendable, Equatable {
        /// Dotted path, e.g. `apple.transfer.sender.team_id`.
        public let path: String
        /// How the value is read from the environment.
        public let kind: KeyKind
        /// What an absent key means.
        public let defaultValue: KeyDefault
        /// One line saying what the key is for, ending with its rule when it has a range, as the documentation's
        /// table shows it.
        public let summary: String
        /// The values the key accepts when they are a fixed list (`database.pooler`: `none`, `session`,
        /// `transaction`), in declaration order; nil for any other key. A value outside it is refused with the list.
        public let allowedValues: [String]?

        init(_ path: String, _ kind: KeyKind, _ defaultValue: KeyDefault, _ summary: String, _ rule: String?,
             allowedValues: [String]? = nil) {
            self.path = path
            self.kind = kind
            self.defaultValue = defaultValue
            self.summary = rule.map { "\(summary); \($0)" } ?? summary
            self.allowedValues = allowedValues
        }

        /// The same key inside the section at `prefix`.
        func moved(under prefix: String) -> Key {
            Key(prefix.isEmpty ? path : "\(prefix).\(path)", kind, defaultValue, summary, nil, allowedValues: allowedValues)
        }

        /// The environment variable that overrides it.
        public var environmentVariable: String { BatonConfiguration.environmentVariable(for: path) }

        /// Whether the key is a member of a ``KeyKind/records`` list's objects (`legacy.email_copies[].table`), read
        /// from the environment only as part of the list's variable.
        public var isRecordMember: Bool { path.contains("[].") }

        /// Whether the key must be present when its section is.
        public var required: Bool { defaultValue == .required }

        /// The default as the documentation states it: `required`, `required in \`sender\``, or the default's text.
        public var defaultDescription: String {
            switch defaultValue {
            case .required:
                let sections = path.split(separator: ".").dropLast()
                if let list = sections.last, list.hasSuffix("[]") { return "required in each `\(list.dropLast(2))` entry" }
                return sections.count < 2 ? "required" : "required in `\(sections.last!)`"
            case .absent(let text), .value(let text):
                return text
            }
        }
    }

    /// Every key of the JSON file, in file order, from the sections' declarations below. Keys not listed are
    /// refused as typos, and only listed keys are read from the environment.
    public static let keys: [Key] = declaredKeys(under: "")

    /// The environment variable holding the admin token itself (it has no JSON key).
    public static let adminTokenVariable = "BATON_ADMIN_TOKEN"

    /// The environment variable holding the service token itself (it has no JSON key).
    public static let serviceTokenVariable = "BATON_SERVICE_TOKEN"

    /// `BATON_` + the path upper-cased with `.` as `_`: `database.url` → `BATON_DATABASE_URL`.
    /// An index in a list (`apple.client_ids[1]`) names the list's variable.
    /// `legacy.email.column` would collide with `legacy.email_column`, so it is `BATON_LEGACY_EMAIL_TABLE_COLUMN`, and
    /// `legacy.email.derived` (beside `legacy.email_derived`) is `BATON_LEGACY_EMAIL_TABLE_DERIVED`.
    /// A member of a list's objects (`legacy.email_copies[0].table`) names the list's variable.
    public static func environmentVariable(for path: String) -> String {
        let key = keyPath(of: path)
        if key == "legacy.email.column" { return "BATON_LEGACY_EMAIL_TABLE_COLUMN" }
        if key == "legacy.email.derived" { return "BATON_LEGACY_EMAIL_TABLE_DERIVED" }
        let list = key.split(separator: "[", maxSplits: 1).first.map(String.init) ?? key
        return "BATON_" + list.uppercased().replacingOccurrences(of: ".", with: "_")
    }

    /// Whether `path` (an index such as `[0]` ignored) is one of ``keys``, rather than a section.
    static func isKey(_ path: String) -> Bool {
        let key = keyPath(of: path)
        return keys.contains { $0.path == key }
    }

    /// `database.url (BATON_DATABASE_URL)`, … : the required keys directly in `section`.
    static func requiredKeys(in section: String) -> String {
        let depth = section.split(separator: ".").count + 1
        return keys.filter { $0.required && $0.path.hasPrefix(section + ".") && $0.path.split(separator: ".").count == depth }
            .map { "\($0.path) (\($0.environmentVariable))" }.joined(separator: ", ")
    }

    /// `path` with its list indexes as `[]`, a last one dropped: `apple.client_ids[1]` → `apple.client_ids`,
    /// `legacy.email_copies[0].table` → `legacy.email_copies[].table`.
    private static func keyPath(of path: String) -> String {
        var key = ""
        var inIndex = false
        for character in path {
            if character == "]" { inIndex = false }
            if !inIndex { key.append(character) }
            if character == "[" { inIndex = true }
        }
        return key.hasSuffix("[]") ? String(key.dropLast(2)) : key
    }
}

// MARK: - The keys, declared once
//
// Each line declares one key: its JSON name, the property it fills, what its absence means (required, the
// initializer's default, or a documented absence), its rule, and the documentation's line for it.

extension BatonConfiguration {
    static let fields: [ConfigurationField<BatonConfiguration>] = [
        .defaulted("listen", \.listen, check: .listenAddress,
                   "address of `baton serve`: `host:port`, `[v6]:port`; port 0 picks a free port"),
        .section("database", \.database),
        .section("apple", \.apple),
        .section("legacy", \.legacy),
        .optional("admin_token_file", \.adminTokenFile, kind: .path, absent: "absent",
                  check: .nonEmpty(.invalidValue, "must be a path (remove the key to serve without an admin token)"),
                  "a file holding the admin token for `GET /v1/report`"),
        .optional("service_token_file", \.serviceTokenFile, kind: .path, absent: "absent",
                  check: .nonEmpty(.invalidValue, "must be a path (remove the key to serve credential states without a token)"),
                  "a file holding a token `GET /v1/credential-state` and `POST /v1/link/session` then require (`Authorization: Bearer …`); without it the routes are open"),
        .defaulted("require_nonce", \.requireNonce,
                   "`baton serve`: `POST /v1/signin` without a `nonce` is refused (400 `invalid_request`)"),
        .defaulted("max_link_sessions", \.maxLinkSessions, check: .within(1...1_000_000),
                   "`baton serve`: link sessions (`POST /v1/link/session`) live at once, each for 600 s; one more is answered 503 `too_many_link_sessions` and stored nowhere, so requests cannot grow `baton.link_sessions` without bound (each new session also deletes up to 100 expired ones)"),
        .section("server", \.server),
        .section("jobs", \.jobs),
        .defaulted("report_refresh_seconds", \.reportRefreshSeconds, check: .within(10...86_400, unit: "seconds", zero: "no reload"),
                   "how often the `GET /report` page reloads itself (a meta refresh, no script)"),
    ]

    static var defaults: BatonConfiguration { BatonConfiguration(database: .defaults, apple: .defaults, legacy: .defaults) }
}

extension BatonConfiguration.Database {
    static let fields: [ConfigurationField<Self>] = [
        .required("url", \.url, check: .connectionString,
                  "any libpq connection string, checked by libpq: a URI (`postgresql://user@host/db`, `postgresql:///db?host=/socket/dir`), several hosts for failover (`postgresql://u@db1:5432,db2:5432/app?target_session_attrs=read-write`), key/value (`host=db1,db2 port=5432,5432 dbname=app target_session_attrs=read-write`) or `service=NAME`; may hold a password, printed only redacted"),
        .defaulted("pool_size", \.poolSize, check: .within(1...1000),
                   "connections per process; `baton serve` also opens one pipeline connection per event loop (`server.event_loops`), for sign-ins"),
        .optional("statement_timeout_ms", \.statementTimeoutMilliseconds, absent: "`5000` for `baton serve`, none for the jobs",
                  check: .within(0...3_600_000, unit: "milliseconds", zero: "none"),
                  "longest a statement may run or wait for a lock, on every connection including replacements; past it the request gets a 503 instead of hanging; sent as `-c statement_timeout` after the string's own `options`, or as `database.pooler` says; `0` sends none"),
        .defaulted("pooler", \.pooler,
                   "what is in front of PostgreSQL: `none`; `session` (PgBouncer `pool_mode = session`: the timeout is sent with `SET`); `transaction` (`pool_mode = transaction`: statements unnamed, the timeout set in each transaction, no pipeline per event loop). With `none` or `session`, a transaction-mode pooler found at start-up is refused ([scaling.md](scaling.md#pgbouncer))"),
    ]

    static var defaults: Self { Self(url: "") }
}

extension BatonConfiguration.Apple {
    static let fields: [ConfigurationField<Self>] = [
        .defaulted("base_url", \.baseURL, check: .appleURL,
                   "where `/auth/token` and `/auth/usermigrationinfo` live; the emulator's URL in tests and rehearsals"),
        .derived("keys_url", \.keysURL, documented: "`base_url` + `/auth/keys`", from: { Self.keysURL(for: $0.baseURL) }, check: .appleURL,
                 "the key set that signs identity tokens"),
        .defaulted("issuer", \.issuer, check: .webURL,
                   "the `iss` identity tokens must carry"),
        .required("client_ids", \.clientIDs, check: .clientIDs(atLeastOne: true),
                  "client IDs accepted as `aud`: bundle IDs and Services IDs, **without** a `TEAMID.` prefix"),
        .defaulted("legacy_client_ids", \.legacyClientIDs, check: .clientIDs(atLeastOne: false),
                   "client IDs of the sending team accepted for re-linking (`POST /v1/link`); one also in `apple.client_ids` is refused at start-up (a current-team token would pass as the sending team's)"),
        .defaulted("notification_max_age_seconds", \.notificationMaxAgeSeconds, check: .within(60...2_592_000, unit: "seconds"),
                   "`baton serve`: the oldest server-to-server notification accepted, by its `iat`"),
        .optionalSection("transfer", \.transfer),
    ]

    static var defaults: Self { Self(clientIDs: []) }
}

extension BatonConfiguration.Transfer {
    static let fields: [ConfigurationField<Self>] = [
        .required("client_id", \.clientID, check: .clientID,
                  "the transferred app's client ID, sent as `client_id` and as the secret's `sub`"),
        .optional("accepted_at", \.acceptedAt, absent: "absent",
                  "when the recipient accepted the transfer (ISO 8601 with a zone); the 60-day window starts here"),
        .optionalSection("sender", \.sender),
        .optionalSection("recipient", \.recipient),
    ]

    static var defaults: Self { Self(clientID: "") }
}

extension BatonConfiguration.TeamCredentials {
    static let fields: [ConfigurationField<Self>] = [
        .required("team_id", \.teamID, check: .teamID,
                  "the team's ID: 10 upper-case letters or digits; the recipient's must differ from the sender's"),
        .optional("key_id", \.keyID, absent: "absent: the team is only named", check: .keyID,
                  "the ID of the team's Sign in with Apple key (10 letters or digits); only the side that signs needs it: the sender's machine names the recipient by `team_id` alone"),
        .optional("private_key_path", \.privateKeyPath, kind: .path, absent: "absent, with `key_id`", check: .nonEmpty(.missing, "the path of the team's .p8 key is empty"),
                  "that key's `.p8` file (PKCS#8 PEM, EC P-256): the sender's creates transfer identifiers (`baton transfer-ids`), the recipient's exchanges them (`baton exchange`)"),
    ]

    static var defaults: Self { Self(teamID: "") }
}

extension BatonConfiguration.Legacy {
    static let fields: [ConfigurationField<Self>] = [
        .required("table", \.table,
                  "the application's user or identity table, optionally schema-qualified (`public.users`, `auth.identities`); quoted, so case-sensitive ([schemas.md](schemas.md))"),
        .required("key_column", \.keyColumn,
                  "its primary key column (unique: checked at start-up)"),
        .required("subject_column", \.subjectColumn,
                  "the column holding the Apple `sub`; a unique index making it unique among the rows `legacy.where` selects is required at start-up ([where filters](#where-filters)), but for a subject inside JSON (`legacy.subject_path`)"),
        .optional("subject_format", \.subjectFormat, absent: "`{sub}`",
                  "how `legacy.subject_column` stores a `sub`: a text holding `{sub}` exactly once, such as `apple:{sub}` (Ory Kratos' `identity_credential_identifiers.identifier`); Baton binds the stored form where it compares or writes the column, reads the bare `sub` back, and treats a row whose column lacks the text around `{sub}` as not an Apple row ([schemas.md](schemas.md#ory-kratos))"),
        .optional("subject_path", \.subjectPath, absent: "`null`: the column holds the subject",
                  "the object keys leading to the subject inside `legacy.subject_column` when that column holds JSON (json, jsonb, or text holding JSON): Logto's `[\"apple\", \"userId\"]` in `users.identities`; lookups read `#>>` that path, the rewrite sets it with `jsonb_set`, keeping every other key; Baton prints the unique expression index it uses, and without one takes a lock of its own on the new `sub` ([schemas.md](schemas.md#start-up-checks))"),
        .records("subject_copies", \.subjectCopies, absent: "none",
                 "further copies of the bare `sub`, each rewritten in the same statement as the subject where it holds the old `sub`, never added where absent: a column or JSON location of the same row (Logto's `identities` at `[\"apple\", \"details\", \"id\"]`), or of another table's rows that reference the legacy row (Kratos' `identity_credentials.config`, SuperTokens' `thirdparty_user_to_tenant`); from the environment a JSON array"),
        .optional("email_column", \.emailColumn, absent: "`null`",
                  "the column of `legacy.table` holding the user's email; leave out when the email is in another table (`legacy.email`) or nowhere"),
        .optional("transfer_column", \.transferColumn, absent: "`null`",
                  "a column holding each user's transfer identifier, if the application stores them; between companies the recipient's rows may hold only this (subject NULL)"),
        .optional("where", \.filters, absent: "`null`",
                  "filters selecting the Apple rows of a table shared with other providers, one condition per column: a string for equality (`{\"provider\": \"apple\"}`), `{\"not\": \"\"}` (not NULL and not that value: not empty), `{\"in\": [\"a\", \"b\"]}`, `{\"not_null\": true}` ([where filters](#where-filters)); from the environment `provider=apple,kind=oauth` or the JSON object; part of every lookup, rewrite, bulk query and report"),
        .optionalSection("email", \.email),
        .optionalSection("json", \.json),
        .records("email_copies", \.emailCopies, absent: "none",
                 "further tables holding their own copy of the user's email, one row per address (allauth's `account_emailaddress`): the user's row holding the old address gets the new one under `legacy.email_policy`, its other columns kept, no row added or deleted; another row already holding the new address keeps the old one and records an `email_conflict`; from the environment a JSON array"),
        .optional("email_policy", \.emailPolicy, absent: "`relay`",
                  "`relay`: replace a stored email only when it is a private relay address (at migration, or when Apple's relay address changes); `always`; `never`. Without an email location Baton never writes emails"),
        .optional("on_duplicate", \.onDuplicate, absent: "`report`",
                  "a second account under the new team's identifier beside the user's real one (a sign-in that bypassed Baton during the cutover): `report` records the pair in `baton.duplicates` and moves nothing; `merge` also moves the Apple identity onto the real record where Baton meets the pair (`baton merge` does it for recorded pairs either way; [runbook.md](runbook.md#arriving-after-acceptance))"),
        .optional("created_at_column", \.createdAtColumn, absent: "`null`",
                  "a timestamp column of `legacy.table` holding when a row was created; recorded for a duplicate's fresh record, shown by `baton report`"),
        .optional("email_derived", \.emailDerived, absent: "`null`",
                  "further columns of `legacy.table` written whenever `legacy.email_column` is, column → `\"same\"` (the new email) or `\"lower\"` (lower-cased); none of the columns Baton writes or filters on; from the environment `column=lower` pairs or the JSON object"),
    ]

    static var defaults: Self { Self(table: "", keyColumn: "", subjectColumn: "", emailColumn: nil) }
}

extension LegacyEmailTable {
    static let fields: [ConfigurationField<Self>] = [
        .required("table", \.table,
                  "the table holding the email when it is not `legacy.table` (`public.auth_user`, `auth.users`)"),
        .required("column", \.column,
                  "its email column (the variable's name avoids `BATON_LEGACY_EMAIL_COLUMN`)"),
        .required("key_column", \.keyColumn,
                  "its key column"),
        .required("reference_column", \.referenceColumn,
                  "the column of `legacy.table` referencing that key (`user_id`)"),
        .optional("derived", \.derived, absent: "`null`",
                  "further columns of that row written whenever its email is, column → `\"same\"` (the new email: Keycloak's `email_constraint`) or `\"lower\"` (lower-cased); from the environment `column=same` pairs or the JSON object (the variable's name avoids `BATON_LEGACY_EMAIL_DERIVED`)"),
    ]

    static var defaults: Self { Self(table: "", column: "", keyColumn: "", referenceColumn: "") }
}

extension LegacyJSONCopy {
    static let fields: [ConfigurationField<Self>] = [
        .required("column", \.column,
                  "a json, jsonb or text column of `legacy.table` copying the claims (`extra_data`, `identity_data`); never a generated column"),
        .optional("subject_keys", \.subjectKeys, absent: "`[\"sub\"]`",
                  "its top-level keys rewritten with the new subject (a missing key is not added)"),
        .optional("email_keys", \.emailKeys, absent: "`[]`",
                  "its top-level keys rewritten with the new email, under `legacy.email_policy`"),
        .optional("email_table_column", \.emailTableColumn, absent: "`null`",
                  "a json, jsonb or text column of `legacy.email.table` holding the same keys (Supabase's `auth.users.raw_user_meta_data`); there a key is rewritten only where it holds the old subject or email, since that row copies whichever provider signed in last"),
    ]

    static var defaults: Self { Self(column: "") }
}

extension LegacySubjectCopy {
    static let fields: [ConfigurationField<Self>] = [
        .required("column", \.column,
                  "the column holding the copy"),
        .optional("path", \.path, absent: "`null`: the column holds the bare `sub`",
                  "a JSON location in that column: strings are object keys, a one-member object picks the array elements whose member holds that string (Kratos' `[\"providers\", {\"provider\": \"apple\"}, \"subject\"]`)"),
        .optional("table", \.table, absent: "`null`: the legacy row itself",
                  "another table holding the copy, optionally schema-qualified; not `legacy.table`, `legacy.email.table` nor an email copy's table"),
        .optional("key_column", \.keyColumn, absent: "`null`; required with `table`",
                  "that table's column matching `reference_column` of the legacy row"),
        .optional("reference_column", \.referenceColumn, absent: "`legacy.key_column`",
                  "the column of `legacy.table` that `key_column` matches"),
        .optional("where", \.filters, absent: "`null`",
                  "filters narrowing that table's rows, as `legacy.where`"),
    ]

    static var defaults: Self { Self(column: "") }
}

extension LegacyEmailCopy {
    static let fields: [ConfigurationField<Self>] = [
        .required("table", \.table,
                  "the table, optionally schema-qualified; not `legacy.table` nor `legacy.email.table`"),
        .required("column", \.column,
                  "its email column (text, varchar or citext)"),
        .required("user_column", \.userColumn,
                  "its column holding the user's key: `legacy.email.key_column`'s value when the email is in `legacy.email`, else `legacy.key_column`'s"),
        .optional("where", \.filters, absent: "`null`",
                  "filters narrowing the rows that are copies, as `legacy.where`"),
        .optional("path", \.path, absent: "`null`: the column is the address",
                  "where in `column` (json, jsonb or text holding JSON) the address is: strings are object keys, a one-member object `{\"type\": \"apple\"}` picks the array elements whose member `type` is that string (`[\"emails\", {\"type\": \"apple\"}, \"value\"]`); rewritten with `jsonb_set` where it holds the old address (ignoring case), every other key and element kept, a missing one never added"),
        .optional("derived", \.derived, absent: "`null`",
                  "further columns of the copy's row written whenever the copy is, column → `\"same\"` or `\"lower\"` (Gitea's `email_address.lower_email`)"),
    ]

    static var defaults: Self { Self(table: "", column: "", userColumn: "") }
}

extension BatonConfiguration.Jobs {
    static let fields: [ConfigurationField<Self>] = [
        .defaulted("max_replica_lag_seconds", \.maxReplicaLagSeconds, check: .within(0...86_400, unit: "seconds", zero: "no limit"),
                   "bulk jobs (`transfer-ids`, `exchange`, `import transfers`, `merge`; `rehearse` before its copy): while a standby replays more than this far behind (or stands still behind the primary), the job claims nothing new until it catches up, and past half of it each claim waits up to 0.5 s in proportion ([bulk-migration.md](bulk-migration.md)); `--max-replica-lag` overrides it; SIGHUP rereads it"),
        .optional("max_active_backends", \.maxActiveBackends, absent: "no limit", check: .within(1...100_000),
                  "bulk jobs (the same): while more client backends than this are active on the database (`pg_stat_activity`, the job's probe aside, the job's own connections counted), the job claims nothing new, and past half of it each claim waits up to 0.5 s in proportion; `--max-active-backends` overrides it; SIGHUP rereads it"),
    ]

    static var defaults: Self { Self() }
}

extension BatonConfiguration.Server {
    static let fields: [ConfigurationField<Self>] = [
        .defaulted("request_timeout_ms", \.requestTimeoutMilliseconds, check: .within(100...600_000, unit: "milliseconds"),
                   "`baton serve`: a request not answered within it gets 503 `timeout`; also bounds shutdown's wait for running requests"),
        .defaulted("request_head_timeout_ms", \.requestHeadTimeoutMilliseconds, check: .within(100...600_000, unit: "milliseconds"),
                   "`baton serve`: a client must send a whole request (head and body) within it, however slowly it trickles bytes, else the connection is closed"),
        .defaulted("connections_per_ip", \.connectionsPerIP, check: .within(1...10_000),
                   "`baton serve`: connections one client address may hold at once, across the event loops, so that no one address takes all 1,024; one more is answered 503 `too_many_connections` (`Retry-After: 1`) and closed, and a connection stops counting as soon as its client closes it. An application server's pool (or a proxy's) is one address: the default is a quarter of the server and four times a 64-connection pool"),
        .optional("event_loops", \.eventLoops, absent: "one per core", check: .within(1...64),
                  "`baton serve`: threads serving HTTP, each an event loop with its own libmicrohttpd daemon on the port and its own pipeline connection to the database, where sign-ins run"),
        .defaulted("batch_scheduling", \.batchScheduling,
                   "`baton serve`: the event loops' threads run under Linux's `SCHED_BATCH` policy, so a loop woken by a client or by PostgreSQL does not preempt the task on its core; it batches more and the cores switch less (`false`: the default policy, for the lowest latency when the cores are contended)"),
    ]

    static var defaults: Self { Self() }
}
