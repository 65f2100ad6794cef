import BatonAppleSignIn
import BatonPostgres
import Foundation

extension BatonConfiguration {
    /// Checks every value's shape; ``load(path:environment:)`` calls it, and so should code that builds a
    /// configuration by hand.
    ///
    /// Checks: `listen` port range; Apple's URLs parse (`https`, plain `http` only to a loopback host);
    /// `database.url` is a connection string libpq accepts (URI, multi-host URI, key/value, service); no client ID
    /// in both `apple.client_ids` and `apple.legacy_client_ids`; `server.*` and `apple.notification_max_age_seconds`
    /// ranges; `pool_size` 1...1000; `statement_timeout_ms` 0...3,600,000; `report_refresh_seconds` 0 or 10...86,400; client IDs non-empty, made of letters, digits, `.` and `-`, listed
    /// once, and not prefixed by a team ID; team IDs 10 upper-case letters or digits, different for the two
    /// sides; key IDs 10 letters or digits; key paths non-empty; SQL identifiers valid and the subject, email and
    /// transfer columns distinct. Files are not opened here (`baton doctor` does that).
    /// - Throws: ``ConfigurationError`` (`missing`, `invalidValue`) naming the first bad key.
    public func validate() throws {
        guard !listen.host.isEmpty, (0...65_535).contains(listen.port) else {
            throw ConfigurationError(.invalidValue, key: "listen", reason: "expected host:port, such as 127.0.0.1:8080")
        }
        do {
            _ = try PostgresConnectionString(database.url)
        } catch let error as PostgresError {
            throw ConfigurationError(.invalidValue, key: "database.url", reason: error.reason)
        }
        guard (1...1000).contains(database.poolSize) else {
            throw ConfigurationError(.invalidValue, key: "database.pool_size", reason: "must be from 1 to 1000")
        }
        if let timeout = database.statementTimeoutMilliseconds, !(0...3_600_000).contains(timeout) {
            throw ConfigurationError(.invalidValue, key: "database.statement_timeout_ms", reason: "must be from 0 (none) to 3600000 (milliseconds)")
        }
        try Self.checkAppleURL(apple.baseURL, key: "apple.base_url")
        try Self.checkAppleURL(apple.keysURL, key: "apple.keys_url")
        try Self.checkURL(apple.issuer, key: "apple.issuer", schemes: ["http", "https"], requireHost: true)
        guard !apple.clientIDs.isEmpty else {
            throw ConfigurationError(.missing, key: "apple.client_ids", reason: "list at least one client ID (the app's bundle ID or Services ID)")
        }
        try Self.checkClientIDs(apple.clientIDs, key: "apple.client_ids")
        try Self.checkClientIDs(apple.legacyClientIDs, key: "apple.legacy_client_ids")
        // A token is told to be the sending team's only by its `aud`: a client ID in both lists would let two
        // current-team tokens re-link one person's record to another person.
        if let index = apple.legacyClientIDs.firstIndex(where: apple.clientIDs.contains) {
            throw ConfigurationError(.invalidValue, key: "apple.legacy_client_ids[\(index)]", reason: "is also in apple.client_ids: list only the sending team's client IDs here, never the current team's")
        }
        guard (60...30 * 86_400).contains(apple.notificationMaxAgeSeconds) else {
            throw ConfigurationError(.invalidValue, key: "apple.notification_max_age_seconds", reason: "must be from 60 to 2592000 (seconds)")
        }
        for (key, value) in [("server.request_timeout_ms", server.requestTimeoutMilliseconds), ("server.request_head_timeout_ms", server.requestHeadTimeoutMilliseconds)]
        where !(100...600_000).contains(value) {
            throw ConfigurationError(.invalidValue, key: key, reason: "must be from 100 to 600000 (milliseconds)")
        }
        guard (1...10_000).contains(server.connectionsPerIP) else {
            throw ConfigurationError(.invalidValue, key: "server.connections_per_ip", reason: "must be from 1 to 10000")
        }
        if let loops = server.eventLoops, !(1...64).contains(loops) {
            throw ConfigurationError(.invalidValue, key: "server.event_loops", reason: "must be from 1 to 64")
        }
        if let transfer = apple.transfer {
            try Self.checkClientID(transfer.clientID, key: "apple.transfer.client_id")
            if let sender = transfer.sender { try Self.checkCredentials(sender, key: "apple.transfer.sender") }
            if let recipient = transfer.recipient { try Self.checkCredentials(recipient, key: "apple.transfer.recipient") }
            if let sender = transfer.sender, let recipient = transfer.recipient, sender.teamID == recipient.teamID {
                throw ConfigurationError(.invalidValue, key: "apple.transfer.recipient.team_id", reason: "the recipient's team ID equals the sender's: a transfer moves an app between two teams")
            }
        }
        _ = try legacy.identifiers()
        if let adminTokenFile, adminTokenFile.isEmpty {
            throw ConfigurationError(.invalidValue, key: "admin_token_file", reason: "must be a path (remove the key to serve without an admin token)")
        }
        if reportRefreshSeconds != 0, !(10...86_400).contains(reportRefreshSeconds) {
            throw ConfigurationError(.invalidValue, key: "report_refresh_seconds", reason: "must be 0 (no reload) or from 10 to 86400 (seconds)")
        }
        if let serviceTokenFile, serviceTokenFile.isEmpty {
            throw ConfigurationError(.invalidValue, key: "service_token_file", reason: "must be a path (remove the key to serve credential states without a token)")
        }
    }

    /// An Apple URL: `https`, or plain `http` only to a loopback host (the emulator on this machine).
    private static func checkAppleURL(_ url: URL, key: String) throws {
        try checkURL(url.absoluteString, key: key, schemes: ["http", "https"], requireHost: true)
        if url.scheme?.lowercased() == "http", !isLoopback(url.host ?? "") {
            throw ConfigurationError(.invalidValue, key: key, reason: "plain http is accepted only for a loopback host (the emulator): use https")
        }
    }

    /// `localhost`, 127.0.0.0/8 or ::1.
    static func isLoopback(_ host: String) -> Bool {
        let bare = host.hasPrefix("[") && host.hasSuffix("]") ? String(host.dropFirst().dropLast()) : host
        if bare.lowercased() == "localhost" || bare == "::1" { return true }
        let parts = bare.split(separator: ".", omittingEmptySubsequences: false)
        return parts.count == 4 && parts[0] == "127" && parts.allSatisfy { UInt8($0) != nil }
    }

    private static func checkClientID(_ text: String, key: String) throws {
        if let problem = AppleIdentifierFormat.clientIDProblem(text) {
            throw ConfigurationError(.invalidValue, key: key, reason: problem)
        }
    }

    private static func checkClientIDs(_ list: [String], key: String) throws {
        var seen: Set<String> = []
        for (index, clientID) in list.enumerated() {
            try checkClientID(clientID, key: "\(key)[\(index)]")
            guard seen.insert(clientID).inserted else {
                throw ConfigurationError(.invalidValue, key: "\(key)[\(index)]", reason: "a client ID is listed twice")
            }
        }
    }

    private static func checkCredentials(_ credentials: TeamCredentials, key: String) throws {
        guard AppleIdentifierFormat.isTeamID(credentials.teamID) else {
            throw ConfigurationError(.invalidValue, key: "\(key).team_id", reason: "a team ID is 10 upper-case letters or digits (see Membership details in the developer account)")
        }
        guard AppleIdentifierFormat.isKeyID(credentials.keyID) else {
            throw ConfigurationError(.invalidValue, key: "\(key).key_id", reason: "a key ID is 10 letters or digits (the Key ID shown beside the key, also in the .p8 file name)")
        }
        guard !credentials.privateKeyPath.isEmpty else {
            throw ConfigurationError(.missing, key: "\(key).private_key_path", reason: "the path of the team's .p8 key is empty")
        }
    }

    private static func checkURL(_ text: String, key: String, schemes: Set<String>, requireHost: Bool) throws {
        guard let components = URLComponents(string: text), let scheme = components.scheme?.lowercased() else {
            throw ConfigurationError(.invalidValue, key: key, reason: "not a URL")
        }
        guard schemes.contains(scheme) else {
            throw ConfigurationError(.invalidValue, key: key, reason: "the URL's scheme must be \(schemes.sorted().joined(separator: " or "))")
        }
        if requireHost, (components.host ?? "").isEmpty {
            throw ConfigurationError(.invalidValue, key: key, reason: "the URL has no host")
        }
    }
}
