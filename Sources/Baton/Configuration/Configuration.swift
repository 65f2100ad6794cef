import Foundation
import BatonJOSE
import BatonLogging
import BatonPostgres

/// Baton's configuration: a JSON file (default `baton.json`) overridden by `BATON_*` environment variables.
///
/// Every key can be set by an environment variable named after its path: `database.url` is
/// `BATON_DATABASE_URL`, `apple.transfer.accepted_at` is `BATON_APPLE_TRANSFER_ACCEPTED_AT`; lists are
/// comma-separated; an empty value removes the key. The admin token comes only from `BATON_ADMIN_TOKEN` or from
/// the file named by `admin_token_file`, never from the JSON itself. Paths in the JSON file are relative to the
/// file's directory; paths from the environment are relative to the current directory.
/// Each key is declared once in `ConfigurationKeys.swift` (name, property, default, rule, meaning), which decodes,
/// defaults, overrides, checks and documents it; ``BatonConfiguration/keys`` lists them and `docs/configuration.md`
/// shows them.
///
/// Loading validates everything it can without I/O beyond reading the admin token file, and a failure is a
/// ``ConfigurationError`` naming the key and its environment variable.
public struct BatonConfiguration: Sendable, Equatable, Codable, ConfigurationSection {
    /// Where `baton serve` listens; default `127.0.0.1:8080`.
    public var listen: ListenAddress
    /// The PostgreSQL database holding the application's table and Baton's schema.
    public var database: Database
    /// Apple's endpoints, the client IDs, and the transfer's credentials.
    public var apple: Apple
    /// The application's own user table.
    public var legacy: Legacy
    /// The file holding the admin token for `GET /v1/report`, if any.
    public var adminTokenFile: String?
    /// The admin token, from `BATON_ADMIN_TOKEN` or `admin_token_file`; never read from or written to JSON.
    public var adminToken: AdminToken?
    /// Seconds between reloads of the `GET /report` page (a meta refresh); 0 for none; default 300 (`report_refresh_seconds`).
    public var reportRefreshSeconds: Int
    /// The file holding the service token `GET /v1/credential-state` then requires, if any.
    public var serviceTokenFile: String?
    /// The service token, from `BATON_SERVICE_TOKEN` or `service_token_file`; never read from or written to JSON.
    public var serviceToken: AdminToken?
    /// Whether `POST /v1/signin` refuses a request without a nonce (`require_nonce`); default false.
    public var requireNonce: Bool
    /// Link sessions (`POST /v1/link/session`) live at once beyond which the route answers 503; default
    /// ``LinkSession/defaultMaxLive`` (`max_link_sessions`).
    public var maxLinkSessions: Int
    /// Limits of `baton serve`'s HTTP server (`server.*`).
    public var server: Server
    /// When the bulk jobs yield to the database (`jobs.*`).
    public var jobs: Jobs

    /// Creates a configuration; call ``validate()`` on one built by hand.
    public init(
        listen: ListenAddress = ListenAddress(host: "127.0.0.1", port: 8080),
        database: Database,
        apple: Apple,
        legacy: Legacy,
        adminTokenFile: String? = nil,
        adminToken: AdminToken? = nil,
        reportRefreshSeconds: Int = 300,
        serviceTokenFile: String? = nil,
        serviceToken: AdminToken? = nil,
        requireNonce: Bool = false,
        maxLinkSessions: Int = LinkSession.defaultMaxLive,
        server: Server = Server(),
        jobs: Jobs = Jobs()
    ) {
        self.listen = listen
        self.database = database
        self.apple = apple
        self.legacy = legacy
        self.adminTokenFile = adminTokenFile
        self.adminToken = adminToken
        self.reportRefreshSeconds = reportRefreshSeconds
        self.serviceTokenFile = serviceTokenFile
        self.serviceToken = serviceToken
        self.requireNonce = requireNonce
        self.maxLinkSessions = maxLinkSessions
        self.server = server
        self.jobs = jobs
    }

    // MARK: - Sections

    /// `host:port`, e.g. `127.0.0.1:8080` or `[::1]:8080`; port 0 lets the system choose.
    public struct ListenAddress: Sendable, Equatable, Codable, CustomStringConvertible {
        /// The host or IP address, without brackets.
        public var host: String
        /// The TCP port, 0...65535.
        public var port: Int

        /// Creates an address.
        public init(host: String, port: Int) {
            self.host = host
            self.port = port
        }

        /// Parses `host:port` (`[v6]:port` for IPv6); nil when malformed.
        public init?(parsing text: String) {
            guard let colon = text.lastIndex(of: ":") else { return nil }
            var host = String(text[..<colon])
            let portText = text[text.index(after: colon)...]
            if host.hasPrefix("[") && host.hasSuffix("]") {
                host = String(host.dropFirst().dropLast())
            } else if host.contains(":") {
                return nil
            }
            guard !host.isEmpty, !host.contains(where: \.isWhitespace),
                  portText.allSatisfy(\.isASCII), let port = Int(portText), (0...65_535).contains(port)
            else { return nil }
            self.init(host: host, port: port)
        }

        /// Decodes from a `host:port` string.
        public init(from decoder: any Decoder) throws {
            let text = try decoder.singleValueContainer().decode(String.self)
            guard let address = ListenAddress(parsing: text) else {
                throw DecodingError.dataCorrupted(.init(codingPath: decoder.codingPath, debugDescription: "expected host:port, such as 127.0.0.1:8080"))
            }
            self = address
        }

        /// Encodes as a `host:port` string.
        public func encode(to encoder: any Encoder) throws {
            var container = encoder.singleValueContainer()
            try container.encode(description)
        }

        /// `host:port`, with brackets around an IPv6 host.
        public var description: String {
            host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)"
        }
    }

    /// The `server` section: limits of `baton serve`'s HTTP server against slow or greedy clients.
    /// Each limit's range is declared with its key and checked by ``BatonConfiguration/validate()``.
    public struct Server: Sendable, Equatable, Codable, ConfigurationSection {
        /// The longest a request's handler may run before the answer is 503 `timeout`, in milliseconds; also how
        /// long shutdown waits for running handlers. Default 10,000 (`server.request_timeout_ms`).
        public var requestTimeoutMilliseconds: Int
        /// The longest a client may take to send a request's head and body, in milliseconds, however slowly it
        /// trickles bytes. Default 10,000 (`server.request_head_timeout_ms`).
        public var requestHeadTimeoutMilliseconds: Int
        /// Connections one client address may hold at once, across the event loops; one more is answered 503
        /// `too_many_connections`. Default 256 (a quarter of the server's 1,024, four times an application server's
        /// 64-connection pool; `server.connections_per_ip`).
        public var connectionsPerIP: Int
        /// Event loops serving HTTP, each a thread with its own pipeline connection for sign-ins; nil (the
        /// default): one per core (`server.event_loops`).
        public var eventLoops: Int?
        /// Whether the event loops' threads run under Linux's `SCHED_BATCH` policy: their wake-ups do not preempt
        /// the task running on the core, so a loop batches more and the cores switch less. Default true.
        public var batchScheduling: Bool

        /// Creates the section with its defaults.
        public init(requestTimeoutMilliseconds: Int = 10_000, requestHeadTimeoutMilliseconds: Int = 10_000, connectionsPerIP: Int = 256,
                    eventLoops: Int? = nil, batchScheduling: Bool = true) {
            self.requestTimeoutMilliseconds = requestTimeoutMilliseconds
            self.requestHeadTimeoutMilliseconds = requestHeadTimeoutMilliseconds
            self.connectionsPerIP = connectionsPerIP
            self.eventLoops = eventLoops
            self.batchScheduling = batchScheduling
        }
    }

    /// The `jobs` section: when the bulk jobs pause to spare the production database.
    public struct Jobs: Sendable, Equatable, Codable, ConfigurationSection {
        /// The longest replica lag a job tolerates before it claims nothing new, in seconds; 0 for no limit.
        /// Default 10 (`jobs.max_replica_lag_seconds`).
        public var maxReplicaLagSeconds: Int
        /// The most active client backends a job tolerates besides its own probe; nil (the default): no limit
        /// (`jobs.max_active_backends`).
        public var maxActiveBackends: Int?

        /// Creates the section with its defaults.
        public init(maxReplicaLagSeconds: Int = 10, maxActiveBackends: Int? = nil) {
            self.maxReplicaLagSeconds = maxReplicaLagSeconds
            self.maxActiveBackends = maxActiveBackends
        }
    }

    /// The database section.
    public struct Database: Sendable, Equatable, Codable, ConfigurationSection {
        /// A libpq connection URL, `postgresql://…` (it may hold a password: never print it).
        public var url: String
        /// Connections in the pool; default 8 (`database.pool_size`).
        public var poolSize: Int
        /// The `statement_timeout` of the service's connections, in milliseconds (it also bounds waiting for
        /// locks), so a request facing a slow or locked database fails with a 503 instead of hanging, on every
        /// connection including replacements; `baton serve` defaults to 5,000, other commands to none; 0 sends
        /// none (the server's or the role's setting, behind PgBouncer; `database.statement_timeout_ms`).
        public var statementTimeoutMilliseconds: Int?
        /// What is in front of PostgreSQL: nothing (default), a session-mode or a transaction-mode pooler.
        public var pooler: PostgresPooler

        /// Creates the section.
        public init(url: String, poolSize: Int = 8, statementTimeoutMilliseconds: Int? = nil, pooler: PostgresPooler = .none) {
            self.url = url
            self.poolSize = poolSize
            self.statementTimeoutMilliseconds = statementTimeoutMilliseconds
            self.pooler = pooler
        }

        /// A pool to this database with the section's statement timeout and pooler; no connection is opened yet.
        public func pool(maxConnections: Int, logger: Logger = .disabled()) -> PostgresPool {
            PostgresPool(url: url, maxConnections: maxConnections, statementTimeoutMilliseconds: statementTimeoutMilliseconds,
                         pooler: pooler, logger: logger)
        }
    }

    /// The `apple` section.
    public struct Apple: Sendable, Equatable, Codable, ConfigurationSection {
        /// Apple's base URL (the emulator's in tests); default `https://appleid.apple.com`.
        public var baseURL: URL
        /// The identity-token key set; default `base_url` + `/auth/keys`.
        public var keysURL: URL
        /// The `iss` identity tokens must carry; default `https://appleid.apple.com`.
        public var issuer: String
        /// Client IDs accepted as `aud` in identity tokens (bundle and Services IDs, without a team prefix).
        public var clientIDs: [String]
        /// Client IDs of the sending team's tokens accepted for re-linking; default empty.
        public var legacyClientIDs: [String]
        /// The transfer being carried out; absent when there is none.
        public var transfer: Transfer?
        /// The oldest server-to-server notification accepted, by its `iat`, in seconds; default 86,400 (a day).
        public var notificationMaxAgeSeconds: Int

        /// The default base URL, `https://appleid.apple.com`.
        public static let defaultBaseURL = URL(string: "https://appleid.apple.com")!
        /// The default issuer, `https://appleid.apple.com`.
        public static let defaultIssuer = "https://appleid.apple.com"

        /// Creates the section; `keysURL` defaults to `baseURL` + `/auth/keys`.
        public init(
            baseURL: URL = Apple.defaultBaseURL,
            keysURL: URL? = nil,
            issuer: String = Apple.defaultIssuer,
            clientIDs: [String],
            legacyClientIDs: [String] = [],
            transfer: Transfer? = nil,
            notificationMaxAgeSeconds: Int = 86_400
        ) {
            self.baseURL = baseURL
            self.keysURL = keysURL ?? Apple.keysURL(for: baseURL)
            self.issuer = issuer
            self.clientIDs = clientIDs
            self.legacyClientIDs = legacyClientIDs
            self.transfer = transfer
            self.notificationMaxAgeSeconds = notificationMaxAgeSeconds
        }

        /// `base` + `/auth/keys`, keeping any path prefix of `base`.
        static func keysURL(for base: URL) -> URL {
            base.appendingPathComponent("auth").appendingPathComponent("keys")
        }
    }

    /// The transfer: the app's client ID, when the recipient accepted it, and each team's key.
    public struct Transfer: Sendable, Equatable, Codable, ConfigurationSection {
        /// The transferred app's primary client ID (`client_id` of `/auth/token` and `/auth/usermigrationinfo`).
        public var clientID: String
        /// When the recipient accepted the transfer; absent before. The 60-day window starts here.
        public var acceptedAt: Date?
        /// The sending team's credentials (needed to create transfer identifiers).
        public var sender: TeamCredentials?
        /// The receiving team's credentials (needed to exchange transfer identifiers).
        public var recipient: TeamCredentials?

        /// How long Apple keeps transfer identifiers exchangeable after acceptance: 60 days.
        public static let window: TimeInterval = 60 * 86_400

        /// Creates the section.
        public init(clientID: String, acceptedAt: Date? = nil, sender: TeamCredentials? = nil, recipient: TeamCredentials? = nil) {
            self.clientID = clientID
            self.acceptedAt = acceptedAt
            self.sender = sender
            self.recipient = recipient
        }

        /// When the 60-day window closes; nil before acceptance.
        public var windowEndsAt: Date? { acceptedAt.map { $0.addingTimeInterval(Transfer.window) } }

        /// Whole days left in the window at `now` (0 once it has closed, rounded down); nil before acceptance.
        public func daysLeft(now: Date) -> Int? {
            guard let end = windowEndsAt else { return nil }
            return max(0, Int((end.timeIntervalSince(now) / 86_400).rounded(.down)))
        }
    }

    /// One team's Sign in with Apple key.
    public struct TeamCredentials: Sendable, Equatable, Codable, ConfigurationSection {
        /// The team ID: 10 upper-case letters or digits.
        public var teamID: String
        /// The key ID of the `.p8` key: 10 letters or digits; nil where only the team is named (the recipient, on
        /// the sender's machine).
        public var keyID: String?
        /// Path of the `.p8` file (PKCS#8 PEM, EC P-256); nil with `keyID`.
        public var privateKeyPath: String?

        /// Whether this side's key is configured (both the key ID and the file).
        public var hasKey: Bool { keyID != nil && privateKeyPath != nil }

        /// Creates the section.
        public init(teamID: String, keyID: String? = nil, privateKeyPath: String? = nil) {
            self.teamID = teamID
            self.keyID = keyID
            self.privateKeyPath = privateKeyPath
        }
    }

    /// The application's own user (or identity) table, which Baton reads and rewrites but never creates or
    /// drops. The shapes auth frameworks give it, and how to name them here, are in docs/schemas.md.
    public struct Legacy: Sendable, Equatable, Codable, ConfigurationSection {
        /// The table, optionally schema-qualified: `public.users`, `auth.identities`.
        public var table: String
        /// The primary key column.
        public var keyColumn: String
        /// The column holding the Apple `sub`.
        public var subjectColumn: String
        /// How `subjectColumn` stores a `sub`: a text with `{sub}` once, such as `apple:{sub}` (Ory Kratos); nil: `{sub}`.
        public var subjectFormat: String?
        /// The object keys leading to the subject inside `subjectColumn` when that column holds JSON (Logto's
        /// `["apple", "userId"]` in `users.identities`); nil: the column itself holds it.
        public var subjectPath: LegacyJSONPath?
        /// Further copies of the bare `sub` (other columns, JSON locations, other tables), rewritten with the subject.
        public var subjectCopies: [LegacySubjectCopy]?
        /// The column of `table` holding the user's email; nil when the email is elsewhere (``email``) or nowhere.
        public var emailColumn: String?
        /// A column holding each user's transfer identifier, if the application stores them.
        public var transferColumn: String?
        /// Filters (column → condition) selecting the Apple rows of a table shared with other providers, such as
        /// `{"provider": "apple"}` or `{"apple": {"not": ""}}`; nil or empty: every row is an Apple row.
        public var filters: [String: LegacyCondition]?
        /// Where the email lives when it is in another table (the users table the identity row references).
        public var email: LegacyEmailTable?
        /// A JSON column of `table` holding copies of the claims, rewritten with the subject.
        public var json: LegacyJSONCopy?
        /// Further tables holding a copy of the email, one row per address (allauth's `account_emailaddress`).
        public var emailCopies: [LegacyEmailCopy]?
        /// When Baton replaces a stored email (default `relay`).
        public var emailPolicy: EmailPolicy?
        /// What Baton does with a second account made under the new team's identifier (default `report`).
        public var onDuplicate: DuplicatePolicy?
        /// A column of `table` holding when each row was created, recorded for a duplicate's fresh record.
        public var createdAtColumn: String?
        /// Further columns of `table` written with the new email whenever `emailColumn` is (set it after creating the section).
        public var emailDerived: LegacyDerivedColumns?

        /// Creates the section.
        public init(table: String, keyColumn: String, subjectColumn: String, emailColumn: String?, transferColumn: String? = nil,
                    filters: [String: LegacyCondition]? = nil, email: LegacyEmailTable? = nil, json: LegacyJSONCopy? = nil,
                    emailCopies: [LegacyEmailCopy]? = nil, emailPolicy: EmailPolicy? = nil, onDuplicate: DuplicatePolicy? = nil,
                    createdAtColumn: String? = nil, subjectFormat: String? = nil, subjectPath: LegacyJSONPath? = nil,
                    subjectCopies: [LegacySubjectCopy]? = nil) {
            self.table = table
            self.keyColumn = keyColumn
            self.subjectColumn = subjectColumn
            self.emailColumn = emailColumn
            self.transferColumn = transferColumn
            self.filters = filters
            self.email = email
            self.json = json
            self.emailCopies = emailCopies
            self.emailPolicy = emailPolicy
            self.onDuplicate = onDuplicate
            self.createdAtColumn = createdAtColumn
            self.subjectFormat = subjectFormat
            self.subjectPath = subjectPath
            self.subjectCopies = subjectCopies
        }

        /// The validated identifiers, ready for `PostgresQuery` interpolation (which quotes them).
        /// - Throws: ``ConfigurationError`` (`invalidValue`) naming the first invalid one.
        public func identifiers() throws -> LegacyIdentifiers {
            try LegacyIdentifiers(self)
        }

        /// The table, quoted for SQL: `"public"."users"`.
        /// - Throws: ``ConfigurationError`` (`invalidValue`) when the name is not a valid identifier.
        public func quotedTable() throws -> String {
            try identifier(\.table, in: BatonConfiguration.name(of: \.legacy), allowSchema: true).quoted
        }
    }

    /// Validates an identifier from the configuration: `^[A-Za-z_][A-Za-z0-9_]{0,62}$`, with an optional
    /// `schema.` prefix when `allowSchema` (tables; not columns).
    /// - Throws: ``ConfigurationError`` (`invalidValue`) naming `key`.
    public static func identifier(_ text: String, key: String, allowSchema: Bool) throws -> PostgresIdentifier {
        guard let identifier = try? PostgresIdentifier(text), allowSchema || identifier.schema == nil else {
            let shape = allowSchema
                ? "an SQL identifier, optionally schema-qualified like public.users (letters, digits, _; not starting with a digit; at most 63 each)"
                : "an SQL identifier without a schema (letters, digits, _; not starting with a digit; at most 63)"
            throw ConfigurationError(.invalidValue, key: key, reason: "must be \(shape)")
        }
        return identifier
    }

    /// Validates an identifier like ``identifier(_:key:allowSchema:)`` and quotes it for SQL:
    /// `public.users` → `"public"."users"`. Quoted identifiers are case-sensitive.
    /// - Throws: ``ConfigurationError`` (`invalidValue`) naming `key`.
    public static func quoteIdentifier(_ text: String, key: String, allowSchema: Bool) throws -> String {
        try identifier(text, key: key, allowSchema: allowSchema).quoted
    }
}

/// A bearer token (the admin token, the service token): compared in constant time, never printed.
public struct AdminToken: Sendable, Equatable, CustomStringConvertible, CustomDebugStringConvertible, CustomReflectable {
    private let value: [UInt8]

    /// The shortest token accepted: 16 characters.
    public static let minimumLength = 16

    /// Wraps `text`; nil when it is shorter than ``minimumLength``.
    public init?(_ text: String) {
        guard text.count >= AdminToken.minimumLength else { return nil }
        value = Array(text.utf8)
    }

    /// Whether `candidate` is the token, in constant time (``ConstantTime/equals(_:_:)``): the lengths are
    /// compared as integers, so the token followed by extra bytes does not match.
    public func matches(_ candidate: some StringProtocol) -> Bool {
        ConstantTime.equals(Array(candidate.utf8), value)
    }

    /// Always `<redacted>`.
    public var description: String { "<redacted>" }
    /// Always `<redacted>`.
    public var debugDescription: String { "<redacted>" }
    /// No children, so `dump` shows nothing either.
    public var customMirror: Mirror { Mirror(self, children: [:]) }
}

/// Why a configuration was refused: a stable code, the key (and its environment variable), and a reason.
///
/// The reason never quotes a value, since values may be secrets (a database URL with a password).
public struct ConfigurationError: Error, Equatable, CustomStringConvertible {
    /// What went wrong.
    public enum Code: String, Sendable {
        /// The configuration file (or the admin token file) cannot be read.
        case fileUnreadable = "file_unreadable"
        /// The configuration file is not a JSON object.
        case invalidJSON = "invalid_json"
        /// A key the configuration does not know (a typo, or `admin_token` in the file).
        case unknownKey = "unknown_key"
        /// A required key is absent.
        case missing
        /// A value of the wrong type or shape.
        case invalidValue = "invalid_value"
    }

    /// The stable code.
    public let code: Code
    /// The key's path, e.g. `apple.transfer.sender.team_id`; empty for the whole file.
    public let key: String
    /// Why, in words, without the value.
    public let reason: String

    /// Creates an error.
    public init(_ code: Code, key: String, reason: String) {
        self.code = code
        self.key = key
        self.reason = reason
    }

    /// The environment variable that sets ``key``, e.g. `BATON_APPLE_TRANSFER_SENDER_TEAM_ID`.
    /// Nil for the whole file and for a section (`database`), which no single variable sets.
    public var environmentVariable: String? {
        BatonConfiguration.isKey(key) ? BatonConfiguration.environmentVariable(for: key) : nil
    }

    /// `configuration: apple.transfer.sender.team_id (BATON_APPLE_TRANSFER_SENDER_TEAM_ID): reason`.
    public var description: String {
        if key.isEmpty { return "configuration: \(reason)" }
        guard let variable = environmentVariable else { return "configuration: \(key): \(reason)" }
        return "configuration: \(key) (\(variable)): \(reason)"
    }
}
