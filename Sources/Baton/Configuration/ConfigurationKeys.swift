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
        /// Column → value equality filters: `provider=apple,kind=oauth` in the environment.
        case filters
        /// `true` or `false` (also `1` and `0` in the environment).
        case boolean
        /// A list of objects whose members are declared as keys `path[].member`: a JSON array in the environment.
        case records
    }

    /// What an absent key means.
    public enum KeyDefault: Sendable, Equatable {
        /// The key must be present once its section is (`apple.transfer` and its sides are optional sections).
        case required
        /// The key may stay absent; the text says what that means, for the documentation.
        case absent(String)
        /// The loader fills in `value` when the key is absent and its section present; the text documents it.
        case value(JSONValue, String)
        /// The loader fills in the key named `base` with `suffix` appended as path components (`apple.keys_url`
        /// is `apple.base_url` + `auth/keys`); the text documents it.
        case appending(suffix: String, to: String, String)
    }

    /// One configuration key: its path in the JSON file, the kind of value it holds, its default and its meaning.
    ///
    /// ``BatonConfiguration/keys`` is the one list of them: the loader reads it to refuse unknown keys, to apply
    /// `BATON_*` variables, to resolve relative paths and to fill in defaults; errors name a key's variable
    /// through it; `docs/configuration.md` has one row per key, checked against it by the tests.
    public struct Key: Sendable, Equatable {
        /// Dotted path, e.g. `apple.transfer.sender.team_id`.
        public let path: String
        /// How the value is read from the environment.
        public let kind: KeyKind
        /// What an absent key means.
        public let defaultValue: KeyDefault
        /// One line saying what the key is for, as the documentation's table shows it.
        public let summary: String

        init(_ path: String, _ kind: KeyKind, _ defaultValue: KeyDefault, _ summary: String) {
            self.path = path
            self.kind = kind
            self.defaultValue = defaultValue
            self.summary = summary
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
            case .absent(let text), .value(_, let text), .appending(_, _, let text):
                return text
            }
        }
    }

    /// Every key of the JSON file, in file order: the one place a key is declared, besides its property and
    /// `CodingKeys` case. Keys not listed are refused as typos, and only listed keys are read from the environment.
    public static let keys: [Key] = [
        Key("listen", .string, .value("127.0.0.1:8080", "`127.0.0.1:8080`"),
            "address of `baton serve`: `host:port`, `[v6]:port`; port 0 picks a free port"),
        Key("database.url", .string, .required,
            "any libpq connection string, checked by libpq: a URI (`postgresql://user@host/db`, `postgresql:///db?host=/socket/dir`), several hosts for failover (`postgresql://u@db1:5432,db2:5432/app?target_session_attrs=read-write`), key/value (`host=db1,db2 port=5432,5432 dbname=app target_session_attrs=read-write`) or `service=NAME`; may hold a password, printed only redacted"),
        Key("database.pool_size", .integer, .value(8, "`8`"),
            "connections per process, 1–1000; `baton serve` also opens one pipeline connection per event loop (`server.event_loops`), for sign-ins"),
        Key("database.statement_timeout_ms", .integer, .absent("`5000` for `baton serve`, none for the jobs"),
            "longest a statement may run or wait for a lock, 0–3600000, on every connection including replacements; past it the request gets a 503 instead of hanging; sent as `-c statement_timeout` after the string's own `options`, or as `database.pooler` says; `0` sends none"),
        Key("database.pooler", .string, .value("none", "`none`"),
            "what is in front of PostgreSQL: `none`; `session` (PgBouncer `pool_mode = session`: the timeout is sent with `SET`); `transaction` (`pool_mode = transaction`: statements unnamed, the timeout set in each transaction, no pipeline per event loop). With `none` or `session`, a transaction-mode pooler found at start-up is refused ([scaling.md](scaling.md#pgbouncer))"),
        Key("apple.base_url", .string, .value(.string(Apple.defaultBaseURL.absoluteString), "`https://appleid.apple.com`"),
            "where `/auth/token` and `/auth/usermigrationinfo` live; the emulator's URL in tests and rehearsals"),
        Key("apple.keys_url", .string, .appending(suffix: "auth/keys", to: "apple.base_url", "`base_url` + `/auth/keys`"),
            "the key set that signs identity tokens"),
        Key("apple.issuer", .string, .value(.string(Apple.defaultIssuer), "`https://appleid.apple.com`"),
            "the `iss` identity tokens must carry"),
        Key("apple.client_ids", .list, .required,
            "client IDs accepted as `aud`: bundle IDs and Services IDs, **without** a `TEAMID.` prefix"),
        Key("apple.legacy_client_ids", .list, .value([], "empty"),
            "client IDs of the sending team accepted for re-linking (`POST /v1/link`); one also in `apple.client_ids` is refused at start-up (a current-team token would pass as the sending team's)"),
        Key("apple.notification_max_age_seconds", .integer, .value(86_400, "`86400`"),
            "`baton serve`: the oldest server-to-server notification accepted, by its `iat`, 60–2592000"),
        Key("apple.transfer.client_id", .string, .required,
            "the transferred app's client ID, sent as `client_id` and as the secret's `sub`"),
        Key("apple.transfer.accepted_at", .string, .absent("absent"),
            "when the recipient accepted the transfer (ISO 8601 with a zone); the 60-day window starts here"),
        Key("apple.transfer.sender.team_id", .string, .required,
            "the sending team's ID: 10 upper-case letters or digits"),
        Key("apple.transfer.sender.key_id", .string, .required,
            "the ID of the sending team's Sign in with Apple key (10 characters)"),
        Key("apple.transfer.sender.private_key_path", .path, .required,
            "that key's `.p8` file (PKCS#8 PEM, EC P-256); used to create transfer identifiers (`baton transfer-ids`)"),
        Key("apple.transfer.recipient.team_id", .string, .required,
            "the receiving team's ID; must differ from the sender's"),
        Key("apple.transfer.recipient.key_id", .string, .required,
            "the ID of the receiving team's key"),
        Key("apple.transfer.recipient.private_key_path", .path, .required,
            "that key's `.p8` file; used to exchange transfer identifiers (`baton exchange`)"),
        Key("legacy.table", .string, .required,
            "the application's user or identity table, optionally schema-qualified (`public.users`, `auth.identities`); quoted, so case-sensitive ([schemas.md](schemas.md))"),
        Key("legacy.key_column", .string, .required,
            "its primary key column (unique: checked at start-up)"),
        Key("legacy.subject_column", .string, .required,
            "the column holding the Apple `sub`; a unique index over it and the `legacy.where` columns is required at start-up"),
        Key("legacy.email_column", .string, .absent("`null`"),
            "the column of `legacy.table` holding the user's email; leave out when the email is in another table (`legacy.email`) or nowhere"),
        Key("legacy.transfer_column", .string, .absent("`null`"),
            "a column holding each user's transfer identifier, if the application stores them; between companies the recipient's rows may hold only this (subject NULL)"),
        Key("legacy.where", .filters, .absent("`null`"),
            "equality filters selecting the Apple rows of a table shared with other providers: `{\"provider\": \"apple\"}`; from the environment `provider=apple,kind=oauth`; part of every lookup, rewrite, bulk query and report"),
        Key("legacy.email.table", .string, .required,
            "the table holding the email when it is not `legacy.table` (`public.auth_user`, `auth.users`)"),
        Key("legacy.email.column", .string, .required,
            "its email column (the variable's name avoids `BATON_LEGACY_EMAIL_COLUMN`)"),
        Key("legacy.email.key_column", .string, .required,
            "its key column"),
        Key("legacy.email.reference_column", .string, .required,
            "the column of `legacy.table` referencing that key (`user_id`)"),
        Key("legacy.json.column", .string, .required,
            "a json, jsonb or text column of `legacy.table` copying the claims (`extra_data`, `identity_data`); never a generated column"),
        Key("legacy.json.subject_keys", .list, .absent("`[\"sub\"]`"),
            "its top-level keys rewritten with the new subject (a missing key is not added)"),
        Key("legacy.json.email_keys", .list, .absent("`[]`"),
            "its top-level keys rewritten with the new email, under `legacy.email_policy`"),
        Key("legacy.json.email_table_column", .string, .absent("`null`"),
            "a json, jsonb or text column of `legacy.email.table` holding the same keys (Supabase's `auth.users.raw_user_meta_data`); there a key is rewritten only where it holds the old subject or email, since that row copies whichever provider signed in last"),
        Key("legacy.email_copies", .records, .absent("none"),
            "further tables holding their own copy of the user's email, one row per address (allauth's `account_emailaddress`): the user's row holding the old address gets the new one under `legacy.email_policy`, its other columns kept, no row added or deleted; another row already holding the new address keeps the old one and records an `email_conflict`; from the environment a JSON array"),
        Key("legacy.email_copies[].table", .string, .required,
            "the table, optionally schema-qualified; not `legacy.table` nor `legacy.email.table`"),
        Key("legacy.email_copies[].column", .string, .required,
            "its email column (text, varchar or citext)"),
        Key("legacy.email_copies[].user_column", .string, .required,
            "its column holding the user's key: `legacy.email.key_column`'s value when the email is in `legacy.email`, else `legacy.key_column`'s"),
        Key("legacy.email_copies[].where", .filters, .absent("`null`"),
            "equality filters narrowing the rows that are copies, as `legacy.where`"),
        Key("legacy.email_policy", .string, .absent("`relay`"),
            "`relay`: replace a stored email only when it is a private relay address (at migration, or when Apple's relay address changes); `always`; `never`. Without an email location Baton never writes emails"),
        Key("legacy.on_duplicate", .string, .absent("`report`"),
            "a second account under the new team's identifier beside the user's real one (a sign-in that bypassed Baton during the cutover): `report` records the pair in `baton.duplicates` and moves nothing; `merge` also moves the Apple identity onto the real record where Baton meets the pair (`baton merge` does it for recorded pairs either way; [runbook.md](runbook.md#arriving-after-acceptance))"),
        Key("legacy.created_at_column", .string, .absent("`null`"),
            "a timestamp column of `legacy.table` holding when a row was created; recorded for a duplicate's fresh record, shown by `baton report`"),
        Key("admin_token_file", .path, .absent("absent"),
            "a file holding the admin token for `GET /v1/report`"),
        Key("service_token_file", .path, .absent("absent"),
            "a file holding a token `GET /v1/credential-state` then requires (`Authorization: Bearer …`); without it the route is open"),
        Key("require_nonce", .boolean, .value(false, "`false`"),
            "`baton serve`: `POST /v1/signin` without a `nonce` is refused (400 `invalid_request`)"),
        Key("server.request_timeout_ms", .integer, .value(10_000, "`10000`"),
            "`baton serve`: a request not answered within it gets 503 `timeout`; also bounds shutdown's wait for running requests; 100–600000"),
        Key("server.request_head_timeout_ms", .integer, .value(10_000, "`10000`"),
            "`baton serve`: a client must send a whole request (head and body) within it, however slowly it trickles bytes, else the connection is closed; 100–600000"),
        Key("server.connections_per_ip", .integer, .value(256, "`256`"),
            "`baton serve`: connections one client address may hold at once, across the event loops, so that no one address takes all 1,024; one more is answered 503 `too_many_connections` (`Retry-After: 1`) and closed, and a connection stops counting as soon as its client closes it. An application server's pool (or a proxy's) is one address: the default is a quarter of the server and four times a 64-connection pool; 1–10000"),
        Key("server.event_loops", .integer, .absent("one per core"),
            "`baton serve`: threads serving HTTP, each an event loop with its own libmicrohttpd daemon on the port and its own pipeline connection to the database, where sign-ins run; 1–64"),
        Key("server.batch_scheduling", .boolean, .value(true, "`true`"),
            "`baton serve`: the event loops' threads run under Linux's `SCHED_BATCH` policy, so a loop woken by a client or by PostgreSQL does not preempt the task on its core; it batches more and the cores switch less (`false`: the default policy, for the lowest latency when the cores are contended)"),
        Key("report_refresh_seconds", .integer, .value(300, "`300`"),
            "how often the `GET /report` page reloads itself (a meta refresh, no script); `0` for never, otherwise 10–86,400"),
    ]

    /// The environment variable holding the admin token itself (it has no JSON key).
    public static let adminTokenVariable = "BATON_ADMIN_TOKEN"

    /// The environment variable holding the service token itself (it has no JSON key).
    public static let serviceTokenVariable = "BATON_SERVICE_TOKEN"

    /// `BATON_` + the path upper-cased with `.` as `_`: `database.url` → `BATON_DATABASE_URL`.
    /// An index in a list (`apple.client_ids[1]`) names the list's variable.
    /// `legacy.email.column` would collide with `legacy.email_column`, so it is `BATON_LEGACY_EMAIL_TABLE_COLUMN`.
    /// A member of a list's objects (`legacy.email_copies[0].table`) names the list's variable.
    public static func environmentVariable(for path: String) -> String {
        let key = keyPath(of: path)
        if key == "legacy.email.column" { return "BATON_LEGACY_EMAIL_TABLE_COLUMN" }
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
