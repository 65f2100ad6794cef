import BatonAppleSignIn
import BatonPostgres
import Foundation

extension BatonConfiguration {
    /// Checks every value; ``load(path:environment:)`` calls it, and so should code that builds a configuration
    /// by hand.
    ///
    /// First each key's own rule, as its declaration in `ConfigurationKeys.swift` states it (ranges, URLs, client,
    /// team and key IDs, non-empty paths, `database.url` as libpq accepts it), in file order; then the rules across
    /// keys: no client ID in both `apple.client_ids` and `apple.legacy_client_ids`, different team IDs for the two
    /// sides, and the legacy table's SQL identifiers valid and its subject, email and transfer columns distinct.
    /// Files are not opened here (`baton doctor` does that).
    /// - Throws: ``ConfigurationError`` (`missing`, `invalidValue`) naming the first bad key.
    public func validate() throws {
        try checkFields(at: "")
        // A token is told to be the sending team's only by its `aud`: a client ID in both lists would let two
        // current-team tokens re-link one person's record to another person.
        if let index = apple.legacyClientIDs.firstIndex(where: apple.clientIDs.contains) {
            throw ConfigurationError(.invalidValue, key: "apple.legacy_client_ids[\(index)]", reason: "is also in apple.client_ids: list only the sending team's client IDs here, never the current team's")
        }
        if let sender = apple.transfer?.sender, let recipient = apple.transfer?.recipient, sender.teamID == recipient.teamID {
            throw ConfigurationError(.invalidValue, key: "apple.transfer.recipient.team_id", reason: "the recipient's team ID equals the sender's: a transfer moves an app between two teams")
        }
        _ = try legacy.identifiers()
    }

    /// An Apple URL: `https`, or plain `http` only to a loopback host (the emulator on this machine).
    fileprivate static func checkAppleURL(_ url: URL, key: String) throws {
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

    fileprivate static func checkClientID(_ text: String, key: String) throws {
        if let problem = AppleIdentifierFormat.clientIDProblem(text) {
            throw ConfigurationError(.invalidValue, key: key, reason: problem)
        }
    }

    fileprivate static func checkClientIDs(_ list: [String], key: String) throws {
        var seen: Set<String> = []
        for (index, clientID) in list.enumerated() {
            try checkClientID(clientID, key: "\(key)[\(index)]")
            guard seen.insert(clientID).inserted else {
                throw ConfigurationError(.invalidValue, key: "\(key)[\(index)]", reason: "a client ID is listed twice")
            }
        }
    }

    fileprivate static func checkURL(_ text: String, key: String, schemes: Set<String>, requireHost: Bool) throws {
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

extension ValueCheck where Value == Int {
    /// A whole number in `range`, with `unit` named after it; `zero`, when given, is what 0 means, accepted
    /// even outside `range` (`report_refresh_seconds`: 0 or 10…86400).
    static func within(_ range: ClosedRange<Int>, unit: String? = nil, zero: String? = nil) -> ValueCheck {
        let units = unit.map { " (\($0))" } ?? ""
        let rule: String
        if let zero, range.lowerBound != 0 {
            rule = "must be 0 (\(zero)) or from \(range.lowerBound) to \(range.upperBound)\(units)"
        } else {
            rule = "must be from \(range.lowerBound)\(zero.map { " (\($0))" } ?? "") to \(range.upperBound)\(units)"
        }
        return ValueCheck(documented: rule) { value, key in
            guard range.contains(value) || (zero != nil && value == 0) else {
                throw ConfigurationError(.invalidValue, key: key, reason: rule)
            }
        }
    }
}

extension ValueCheck where Value == BatonConfiguration.ListenAddress {
    /// A host and a port from 0 to 65535 (a hand-built address may have neither).
    static var listenAddress: ValueCheck {
        ValueCheck { address, key in
            guard !address.host.isEmpty, (0...65_535).contains(address.port) else {
                throw ConfigurationError(.invalidValue, key: key, reason: "expected host:port, such as 127.0.0.1:8080")
            }
        }
    }
}

extension ValueCheck where Value == URL {
    /// `https`, or plain `http` only to a loopback host (the emulator on this machine).
    static var appleURL: ValueCheck { ValueCheck { url, key in try BatonConfiguration.checkAppleURL(url, key: key) } }
}

extension ValueCheck where Value == [String] {
    /// Valid client IDs, each listed once; `atLeastOne`: the list must not be empty.
    static func clientIDs(atLeastOne: Bool) -> ValueCheck {
        ValueCheck { list, key in
            if atLeastOne, list.isEmpty {
                throw ConfigurationError(.missing, key: key, reason: "list at least one client ID (the app's bundle ID or Services ID)")
            }
            try BatonConfiguration.checkClientIDs(list, key: key)
        }
    }
}

extension ValueCheck where Value == String {
    /// A connection string libpq accepts (URI, multi-host URI, key/value, service).
    static var connectionString: ValueCheck {
        ValueCheck { text, key in
            do {
                _ = try PostgresConnectionString(text)
            } catch let error as PostgresError {
                throw ConfigurationError(.invalidValue, key: key, reason: error.reason)
            }
        }
    }

    /// An `http` or `https` URL with a host.
    static var webURL: ValueCheck {
        ValueCheck { text, key in try BatonConfiguration.checkURL(text, key: key, schemes: ["http", "https"], requireHost: true) }
    }

    /// A client ID: letters, digits, `.` and `-`, without a team prefix.
    static var clientID: ValueCheck { ValueCheck { text, key in try BatonConfiguration.checkClientID(text, key: key) } }

    /// A team ID: 10 upper-case letters or digits.
    static var teamID: ValueCheck {
        ValueCheck { text, key in
            guard AppleIdentifierFormat.isTeamID(text) else {
                throw ConfigurationError(.invalidValue, key: key, reason: "a team ID is 10 upper-case letters or digits (see Membership details in the developer account)")
            }
        }
    }

    /// A key ID: 10 letters or digits.
    static var keyID: ValueCheck {
        ValueCheck { text, key in
            guard AppleIdentifierFormat.isKeyID(text) else {
                throw ConfigurationError(.invalidValue, key: key, reason: "a key ID is 10 letters or digits (the Key ID shown beside the key, also in the .p8 file name)")
            }
        }
    }

    /// Not empty, else `code` with `reason`.
    static func nonEmpty(_ code: ConfigurationError.Code, _ reason: String) -> ValueCheck {
        ValueCheck { text, key in
            guard !text.isEmpty else { throw ConfigurationError(code, key: key, reason: reason) }
        }
    }
}
