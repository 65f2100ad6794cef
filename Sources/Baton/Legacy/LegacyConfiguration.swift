import BatonPostgres

/// When Baton replaces the email stored for a user (`legacy.email_policy`).
public enum EmailPolicy: String, Sendable, Equatable, Codable, CaseIterable {
    /// Only a private relay address is replaced (at migration, or when Apple's relay address changes);
    /// an address the user gave or changed in the application is kept. The default.
    case relay
    /// The token's email always replaces the stored one.
    case always
    /// Baton never writes an email.
    case never

    /// Whether a sign-in or migration carrying `new` may replace `stored`.
    public func allowsReplacing(_ stored: String?, with new: String?) -> Bool {
        guard let new, new != stored else { return false }
        switch self {
        case .always: return true
        case .never: return false
        case .relay: return stored.map(EmailPolicy.isPrivateRelay) ?? false
        }
    }

    /// Whether `email` is a private relay address (ends with `@privaterelay.appleid.com`, any case).
    public static func isPrivateRelay(_ email: String) -> Bool {
        email.lowercased().hasSuffix(LegacyStore.privateRelayDomain)
    }
}

/// What Baton does when it meets a duplicate (`legacy.on_duplicate`): a second record under the receiving team's
/// identifier beside the user's legacy record, made by a sign-in that did not go through Baton.
public enum DuplicatePolicy: String, Sendable, Equatable, Codable, CaseIterable {
    /// Record the pair in `baton.duplicates`; move nothing (the default). `baton merge` merges recorded pairs.
    case report
    /// Record the pair and move the Apple identity onto the legacy record where Baton meets it.
    case merge
}

/// What one column of a `where` (`legacy.where`, `legacy.email_copies[].where`) must hold for a row to be selected:
/// a JSON string for equality, or an object with one member for the other tests. Values are always bound as
/// parameters; a row whose column is NULL passes none of them.
public enum LegacyCondition: Sendable, Equatable, Codable, ExpressibleByStringLiteral {
    /// `"apple"`: the column equals the value.
    case equals(String)
    /// `{"not": ""}`: the column is not NULL and differs from the value (`<> ''`: not empty).
    case notEquals(String)
    /// `{"in": ["apple", "apple-ios"]}`: the column equals one of the values (at least one).
    case oneOf([String])
    /// `{"not_null": true}`: the column is not NULL.
    case notNull

    /// An equality condition.
    public init(stringLiteral value: String) { self = .equals(value) }

    private enum Member: String, CodingKey, CaseIterable { case not, `in`, notNull = "not_null" }

    private static let shapes = #"must be a string (equality), {"not": "value"}, {"in": ["value", ...]} or {"not_null": true}"#

    /// Decodes a string or a one-member object; anything else is refused with the forms accepted.
    public init(from decoder: any Decoder) throws {
        if let value = try? decoder.singleValueContainer().decode(String.self) {
            self = .equals(value)
            return
        }
        let refused = DecodingError.dataCorrupted(.init(codingPath: decoder.codingPath, debugDescription: Self.shapes))
        guard let container = try? decoder.container(keyedBy: Member.self), container.allKeys.count == 1,
              let member = container.allKeys.first else { throw refused }
        switch member {
        case .not:
            guard let value = try? container.decode(String.self, forKey: .not) else { throw refused }
            self = .notEquals(value)
        case .in:
            guard let values = try? container.decode([String].self, forKey: .in) else { throw refused }
            self = .oneOf(values)
        case .notNull:
            guard (try? container.decode(Bool.self, forKey: .notNull)) == true else { throw refused }
            self = .notNull
        }
    }

    /// Encodes the form ``init(from:)`` reads.
    public func encode(to encoder: any Encoder) throws {
        switch self {
        case .equals(let value):
            var container = encoder.singleValueContainer()
            try container.encode(value)
        case .notEquals(let value):
            var container = encoder.container(keyedBy: Member.self)
            try container.encode(value, forKey: .not)
        case .oneOf(let values):
            var container = encoder.container(keyedBy: Member.self)
            try container.encode(values, forKey: .in)
        case .notNull:
            var container = encoder.container(keyedBy: Member.self)
            try container.encode(true, forKey: .notNull)
        }
    }

    /// Whether the condition only excludes values (`not`, `not_null`), so that a subject column rewritten with an
    /// Apple identifier keeps passing it.
    public var isExclusion: Bool {
        switch self {
        case .notEquals, .notNull: true
        case .equals, .oneOf: false
        }
    }

    /// The one value a selected row's column holds: an equality's, or the value of an `in` of one; nil otherwise.
    public var fixedValue: String? {
        switch self {
        case .equals(let value): value
        case .oneOf(let values) where values.count == 1: values[0]
        case .oneOf, .notEquals, .notNull: nil
        }
    }
}

/// `legacy.email`: the email lives in another table that the identity row references
/// (`auth_user.email` through `socialaccount_socialaccount.user_id`).
public struct LegacyEmailTable: Sendable, Equatable, Codable, ConfigurationSection {
    /// The users table, optionally schema-qualified: `public.auth_user`, `auth.users`.
    public var table: String
    /// Its email column.
    public var column: String
    /// Its key column, which the identity row references.
    public var keyColumn: String
    /// The column of `legacy.table` holding that key (`user_id`).
    public var referenceColumn: String
    /// Further columns of the users row written with the new email whenever `column` is (Keycloak's
    /// `user_entity.email_constraint`); nil: none.
    public var derived: LegacyDerivedColumns?

    /// Creates the section.
    public init(table: String, column: String, keyColumn: String, referenceColumn: String, derived: LegacyDerivedColumns? = nil) {
        self.table = table
        self.column = column
        self.keyColumn = keyColumn
        self.referenceColumn = referenceColumn
        self.derived = derived
    }
}

/// One entry of `legacy.email_copies`: a further table keeping its own copy of the user's email, one row per
/// address (allauth's `account_emailaddress`). The row of the user holding the old address is rewritten with the
/// new one, under `legacy.email_policy`; its other columns are kept and no row is added or deleted.
public struct LegacyEmailCopy: Sendable, Equatable, Codable, ConfigurationSection {
    /// The table, optionally schema-qualified: `public.account_emailaddress`.
    public var table: String
    /// Its email column.
    public var column: String
    /// Its column holding the user's key: the key of `legacy.email.table` when the email lives there, else the
    /// key of `legacy.table`.
    public var userColumn: String
    /// Filters (column → condition, as `legacy.where`) narrowing the rows that are copies; nil: every row of the user.
    public var filters: [String: LegacyCondition]?
    /// Where in `column` (json, jsonb or text holding JSON) the copy is; nil: the column itself is the address.
    public var path: LegacyJSONPath?
    /// Further columns of the copy's row written with the new email whenever the copy is (Gitea's
    /// `email_address.lower_email`); nil: none.
    public var derived: LegacyDerivedColumns?

    /// Creates an entry.
    public init(table: String, column: String, userColumn: String, filters: [String: LegacyCondition]? = nil,
                path: LegacyJSONPath? = nil, derived: LegacyDerivedColumns? = nil) {
        self.table = table
        self.column = column
        self.userColumn = userColumn
        self.filters = filters
        self.path = path
        self.derived = derived
    }
}

/// One entry of `legacy.subject_copies`: a further copy of the bare `sub`, in a column (or at a JSON location in it) of the
/// legacy row itself or of another table's rows that reference it. Where it holds the user's old `sub` it is rewritten
/// with the new one, in the same statement as the subject; nothing is added where it is absent.
public struct LegacySubjectCopy: Sendable, Equatable, Codable, ConfigurationSection {
    /// The column holding the copy.
    public var column: String
    /// A JSON location in `column` (nil: the column holds the bare `sub`).
    public var path: LegacyJSONPath?
    /// Another table holding the copy (nil: the legacy row).
    public var table: String?
    /// With `table`: its column matching ``referenceColumn`` of the legacy row.
    public var keyColumn: String?
    /// With `table`: the column of the legacy table that ``keyColumn`` matches (nil: `legacy.key_column`).
    public var referenceColumn: String?
    /// With `table`: filters narrowing its rows, as `legacy.where`.
    public var filters: [String: LegacyCondition]?

    /// Creates an entry.
    public init(column: String, path: LegacyJSONPath? = nil, table: String? = nil, keyColumn: String? = nil,
                referenceColumn: String? = nil, filters: [String: LegacyCondition]? = nil) {
        self.column = column
        self.path = path
        self.table = table
        self.keyColumn = keyColumn
        self.referenceColumn = referenceColumn
        self.filters = filters
    }
}

/// `legacy.json`: a json/jsonb (or text holding JSON) column of `legacy.table` whose top-level keys copy
/// the claims; the listed keys are rewritten with the new subject and email, other keys never touched, a
/// missing key never added.
public struct LegacyJSONCopy: Sendable, Equatable, Codable, ConfigurationSection {
    /// The column: `extra_data`, `identity_data`.
    public var column: String
    /// Keys holding the subject (default `["sub"]`).
    public var subjectKeys: [String]?
    /// Keys holding the email (default none); rewritten under `legacy.email_policy`.
    public var emailKeys: [String]?
    /// A json/jsonb/text column of the email table (`legacy.email.table`) holding the same keys: Supabase's
    /// `auth.users.raw_user_meta_data`. There a key is rewritten only where it holds the old subject or email,
    /// since the users row copies whichever provider signed in last.
    public var emailTableColumn: String?

    /// Creates the section.
    public init(column: String, subjectKeys: [String]? = nil, emailKeys: [String]? = nil, emailTableColumn: String? = nil) {
        self.column = column
        self.subjectKeys = subjectKeys
        self.emailKeys = emailKeys
        self.emailTableColumn = emailTableColumn
    }
}

extension BatonConfiguration {
    /// The legacy table's validated identifiers and rules.
    public struct LegacyIdentifiers: Sendable, Equatable {
        /// One filter selecting the Apple rows: a column and what it must hold.
        public struct Filter: Sendable, Equatable {
            /// The column.
            public var column: PostgresIdentifier
            /// What it must hold; values are always bound as parameters.
            public var condition: LegacyCondition

            /// The filter with its values as SQL literals, for messages and for the statements Baton prints (an
            /// index's predicate, where no parameter can go): `"apple" <> ''`, `"provider" IN ('a', 'b')`.
            public var literalSQL: String {
                switch condition {
                case .equals(let value): "\(column.quoted) = \(value.sqlLiteral)"
                case .notEquals(let value): "\(column.quoted) <> \(value.sqlLiteral)"
                case .oneOf(let values): "\(column.quoted) IN (\(values.map(\.sqlLiteral).joined(separator: ", ")))"
                case .notNull: "\(column.quoted) IS NOT NULL"
                }
            }
        }

        /// The email's table when it is not `table`.
        public struct EmailTable: Sendable, Equatable {
            /// The users table.
            public var table: PostgresIdentifier
            /// Its email column.
            public var column: PostgresIdentifier
            /// Its key column.
            public var keyColumn: PostgresIdentifier
            /// The column of the legacy table referencing `keyColumn`.
            public var referenceColumn: PostgresIdentifier
            /// The users row's columns following its email (`legacy.email.derived`).
            public var derived: [DerivedColumn] = []
        }

        /// The JSON copy of the claims.
        public struct JSONCopy: Sendable, Equatable {
            /// The column.
            public var column: PostgresIdentifier
            /// Keys rewritten with the subject.
            public var subjectKeys: [String]
            /// Keys rewritten with the email.
            public var emailKeys: [String]
            /// The same keys in a column of the email table, rewritten where they hold the old values.
            public var emailTableColumn: PostgresIdentifier?
        }

        /// A further copy of the bare `sub` (`legacy.subject_copies`).
        public struct SubjectCopy: Sendable, Equatable {
            /// Another table holding a copy: its rows whose `keyColumn` equals the legacy row's `referenceColumn`.
            public struct OtherTable: Sendable, Equatable {
                /// The table.
                public var name: PostgresIdentifier
                /// Its column matching the legacy row.
                public var keyColumn: PostgresIdentifier
                /// The legacy table's column it matches.
                public var referenceColumn: PostgresIdentifier
            }

            /// The other table holding the copy; nil: the legacy row itself.
            public var table: OtherTable?
            /// The column.
            public var column: PostgresIdentifier
            /// The JSON location in the column, if any.
            public var path: LegacyJSONPath?
            /// The filters narrowing the other table's rows, ordered by column name.
            public var filters: [Filter]
        }

        /// A further table holding a copy of the email (`legacy.email_copies`).
        public struct EmailCopy: Sendable, Equatable {
            /// The table.
            public var table: PostgresIdentifier
            /// Its email column.
            public var column: PostgresIdentifier
            /// Its column holding the user's key (the email table's key, else the legacy table's).
            public var userColumn: PostgresIdentifier
            /// The filters narrowing its rows, ordered by column name (empty: every row of the user).
            public var filters: [Filter]
            /// Where in `column` the copy is (nil: the column itself).
            public var path: LegacyJSONPath? = nil
            /// The row's columns following the copy (`derived`).
            public var derived: [DerivedColumn] = []
        }

        /// The table, possibly schema-qualified.
        public var table: PostgresIdentifier
        /// The primary key column.
        public var keyColumn: PostgresIdentifier
        /// The Apple `sub` column.
        public var subjectColumn: PostgresIdentifier
        /// The text `subjectColumn` holds before the bare `sub` (`legacy.subject_format`: `apple:` of `apple:{sub}`; empty by default).
        public var subjectPrefix: String
        /// The text it holds after the bare `sub` (empty by default).
        public var subjectSuffix: String
        /// The keys leading to the subject inside `subjectColumn` when it holds JSON (`legacy.subject_path`).
        public var subjectPath: LegacyJSONPath?
        /// The further copies of the bare `sub`, in configuration order.
        public var subjectCopies: [SubjectCopy]
        /// The email column of `table`, if the email is there.
        public var emailColumn: PostgresIdentifier?
        /// The transfer identifier column, if configured.
        public var transferColumn: PostgresIdentifier?
        /// The filters selecting the Apple rows, ordered by column name (empty: every row).
        public var filters: [Filter]
        /// The email's table, if the email is in another table.
        public var emailTable: EmailTable?
        /// The JSON copy, if configured.
        public var json: JSONCopy?
        /// The further copies of the email, in configuration order.
        public var emailCopies: [EmailCopy]
        /// The columns of `table` following `emailColumn` (`legacy.email_derived`).
        public var emailDerived: [DerivedColumn] = []
        /// When emails are replaced; `never` when no email location is configured.
        public var emailPolicy: EmailPolicy

        /// What to do with a duplicate (`legacy.on_duplicate`, default `report`).
        public var duplicatePolicy: DuplicatePolicy
        /// The creation time column (`legacy.created_at_column`), if configured.
        public var createdAtColumn: PostgresIdentifier?

        /// Whether Baton knows where the email lives (`email_column` or `email`).
        public var hasEmail: Bool { emailColumn != nil || emailTable != nil }

        /// Validates `legacy`.
        /// - Throws: ``ConfigurationError`` (`invalidValue`) naming the first bad key.
        public init(_ legacy: Legacy) throws {
            let path = BatonConfiguration.name(of: \.legacy)
            table = try legacy.identifier(\.table, in: path, allowSchema: true)
            keyColumn = try legacy.identifier(\.keyColumn, in: path)
            subjectColumn = try legacy.identifier(\.subjectColumn, in: path)
            (subjectPrefix, subjectSuffix) = try Self.subjectFormat(legacy.subjectFormat, key: Legacy.key(\.subjectFormat, in: path))
            subjectPath = try legacy.subjectPath?.validated(key: Legacy.key(\.subjectPath, in: path), keysOnly: true)
            let legacyKey = keyColumn
            subjectCopies = try (legacy.subjectCopies ?? []).enumerated().map { index, copy in
                try Self.subjectCopy(copy, in: "\(Legacy.key(\.subjectCopies, in: path))[\(index)]", legacyKey: legacyKey)
            }
            emailColumn = try legacy.identifier(\.emailColumn, in: path)
            transferColumn = try legacy.identifier(\.transferColumn, in: path)
            filters = try Self.filters(legacy, \.filters, in: path)
            emailTable = try legacy.email.map { email in
                let path = Legacy.key(\.email, in: path)
                return EmailTable(table: try email.identifier(\.table, in: path, allowSchema: true), column: try email.identifier(\.column, in: path),
                                  keyColumn: try email.identifier(\.keyColumn, in: path), referenceColumn: try email.identifier(\.referenceColumn, in: path))
            }
            json = try legacy.json.map { try Self.jsonCopy($0, in: Legacy.key(\.json, in: path)) }
            emailCopies = try (legacy.emailCopies ?? []).enumerated().map { index, copy in
                let path = "\(Legacy.key(\.emailCopies, in: path))[\(index)]"
                return EmailCopy(table: try copy.identifier(\.table, in: path, allowSchema: true), column: try copy.identifier(\.column, in: path),
                                 userColumn: try copy.identifier(\.userColumn, in: path), filters: try Self.filters(copy, \.filters, in: path))
            }
            emailPolicy = (emailColumn == nil && emailTable == nil) ? .never : (legacy.emailPolicy ?? .relay)
            duplicatePolicy = legacy.onDuplicate ?? .report
            createdAtColumn = try legacy.identifier(\.createdAtColumn, in: path)
            try checkDistinct()
            try addEmailLocations(legacy)
        }

        /// The text before and after `{sub}` in `format` (nil: both empty), which must hold `{sub}` exactly once and
        /// nothing PostgreSQL cannot store in text (a NUL).
        private static func subjectFormat(_ format: String?, key: String) throws -> (prefix: String, suffix: String) {
            guard let format else { return ("", "") }
            let parts = format.components(separatedBy: "{sub}")
            guard parts.count == 2 else {
                throw ConfigurationError(.invalidValue, key: key, reason: "must contain {sub} exactly once (as in apple:{sub})")
            }
            guard !format.unicodeScalars.contains("\0"), format.utf8.count <= 255 else {
                throw ConfigurationError(.invalidValue, key: key, reason: "must hold no NUL character and at most 255 bytes")
            }
            return (parts[0], parts[1])
        }

        /// The filters in `member` of `section` (at `path`), ordered by column name, each column validated and each
        /// `in` list non-empty.
        private static func filters<Section: ConfigurationSection>(_ section: Section, _ member: KeyPath<Section, [String: LegacyCondition]?>,
                                                                   in path: String) throws -> [Filter] {
            let key = Section.key(member, in: path)
            return try (section[keyPath: member] ?? [:]).sorted { $0.key < $1.key }.map {
                if case .oneOf(let values) = $0.value, values.isEmpty {
                    throw ConfigurationError(.invalidValue, key: "\(key).\($0.key)", reason: "must list at least one value in \"in\"")
                }
                return Filter(column: try BatonConfiguration.identifier($0.key, key: key, allowSchema: false), condition: $0.value)
            }
        }

        /// One entry of `legacy.subject_copies` (at `path`): `key_column` present exactly when `table` is, `reference_column`
        /// and `where` only with `table`.
        private static func subjectCopy(_ copy: LegacySubjectCopy, in path: String, legacyKey: PostgresIdentifier) throws -> SubjectCopy {
            let column = try copy.identifier(\.column, in: path)
            let jsonPath = try copy.path?.validated(key: LegacySubjectCopy.key(\.path, in: path), keysOnly: false)
            guard let tableName = copy.table else {
                if copy.keyColumn != nil || copy.referenceColumn != nil || copy.filters != nil {
                    throw ConfigurationError(.invalidValue, key: path, reason: "key_column, reference_column and where need table (a copy in another table)")
                }
                return SubjectCopy(table: nil, column: column, path: jsonPath, filters: [])
            }
            guard copy.keyColumn != nil else {
                throw ConfigurationError(.invalidValue, key: LegacySubjectCopy.key(\.keyColumn, in: path), reason: "is required with table")
            }
            let name = try BatonConfiguration.identifier(tableName, key: LegacySubjectCopy.key(\.table, in: path), allowSchema: true)
            let keyColumn = try copy.identifier(\.keyColumn, in: path)!
            let filters = try Self.filters(copy, \.filters, in: path)
            if column == keyColumn || filters.contains(where: { $0.column == column || $0.column == keyColumn }) {
                throw ConfigurationError(.invalidValue, key: path, reason: "column, key_column and the where columns must differ")
            }
            let table = SubjectCopy.OtherTable(name: name, keyColumn: keyColumn, referenceColumn: try copy.identifier(\.referenceColumn, in: path) ?? legacyKey)
            return SubjectCopy(table: table, column: column, path: jsonPath, filters: filters)
        }

        /// `legacy.json` (at `path`) with its default keys, each list of distinct, non-empty keys, the two disjoint.
        private static func jsonCopy(_ copy: LegacyJSONCopy, in path: String) throws -> JSONCopy {
            let subjectKeys = copy.subjectKeys ?? ["sub"]
            let emailKeys = copy.emailKeys ?? []
            for (member, keys) in [(\LegacyJSONCopy.subjectKeys, subjectKeys), (\LegacyJSONCopy.emailKeys, emailKeys)]
            where keys.contains(where: { $0.isEmpty || $0.utf8.count > 255 }) || Set(keys).count != keys.count {
                throw ConfigurationError(.invalidValue, key: LegacyJSONCopy.key(member, in: path), reason: "must list distinct, non-empty JSON keys")
            }
            guard Set(subjectKeys).isDisjoint(with: emailKeys) else {
                throw ConfigurationError(.invalidValue, key: LegacyJSONCopy.key(\.emailKeys, in: path),
                                         reason: "must not repeat a key of \(LegacyJSONCopy.key(\.subjectKeys, in: path))")
            }
            return JSONCopy(column: try copy.identifier(\.column, in: path), subjectKeys: subjectKeys, emailKeys: emailKeys,
                            emailTableColumn: try copy.identifier(\.emailTableColumn, in: path))
        }

        /// Each subject copy writes what no other part of the statement writes: a column of the legacy row that is no
        /// other configured column (the subject column only at a JSON location beside `legacy.subject_path`), or a table
        /// of its own (PostgreSQL applies only one of two writes to one row in one statement).
        private func checkSubjectCopies() throws {
            let others = [keyColumn, emailColumn, transferColumn, json?.column, createdAtColumn, emailTable?.referenceColumn].compactMap { $0 }
                + filters.map(\.column)
            for (index, copy) in subjectCopies.enumerated() {
                let key = "legacy.subject_copies[\(index)]"
                guard let table = copy.table else {
                    if others.contains(copy.column) || (copy.column == subjectColumn && (subjectPath == nil || copy.path == nil)) {
                        throw ConfigurationError(.invalidValue, key: key + ".column", reason: "must be a column Baton writes nothing else into (the subject column only at a JSON path beside legacy.subject_path)")
                    }
                    continue
                }
                let taken = [self.table, emailTable?.table].compactMap { $0 } + emailCopies.map(\.table)
                    + subjectCopies[..<index].compactMap(\.table?.name)
                if taken.contains(table.name) {
                    throw ConfigurationError(.invalidValue, key: key + ".table", reason: "must be a table no other part of legacy writes (one entry per table)")
                }
            }
        }

        private func checkDistinct() throws {
            if emailColumn != nil && emailTable != nil {
                throw ConfigurationError(.invalidValue, key: "legacy.email", reason: "set either legacy.email_column or legacy.email, not both")
            }
            if emailColumn == subjectColumn {
                throw ConfigurationError(.invalidValue, key: "legacy.email_column", reason: "must differ from legacy.subject_column")
            }
            if let transferColumn, transferColumn == subjectColumn || transferColumn == emailColumn {
                throw ConfigurationError(.invalidValue, key: "legacy.transfer_column", reason: "must differ from legacy.subject_column and legacy.email_column")
            }
            // A rewritten row must stay selected: the subject column may only be required non-empty or non-NULL.
            let written = [emailColumn, json?.column].compactMap { $0 }
            if let filter = filters.first(where: { written.contains($0.column) || ($0.column == subjectColumn && !$0.condition.isExclusion) }) {
                throw ConfigurationError(.invalidValue, key: "legacy.where",
                                         reason: "the filter column \(filter.column) is a column Baton rewrites (the subject column takes only \"not\" or \"not_null\")")
            }
            if let json, json.column == subjectColumn || json.column == emailColumn || json.column == transferColumn {
                throw ConfigurationError(.invalidValue, key: "legacy.json.column", reason: "must differ from the subject, email and transfer columns")
            }
            if let column = json?.emailTableColumn, emailTable == nil || column == emailTable?.column {
                throw ConfigurationError(.invalidValue, key: "legacy.json.email_table_column", reason: "needs legacy.email, and must differ from legacy.email.column")
            }
            if !emailCopies.isEmpty && !hasEmail {
                throw ConfigurationError(.invalidValue, key: "legacy.email_copies", reason: "needs the email's own location: set legacy.email_column or legacy.email")
            }
            try checkSubjectCopies()
            for (index, copy) in emailCopies.enumerated() {
                let key = "legacy.email_copies[\(index)]"
                // Two writes to one row in one statement: PostgreSQL would apply only one of them.
                if copy.table == table || copy.table == emailTable?.table {
                    throw ConfigurationError(.invalidValue, key: key + ".table", reason: "must be another table than legacy.table and legacy.email.table")
                }
                if emailCopies[..<index].contains(where: { $0.table == copy.table }) {
                    throw ConfigurationError(.invalidValue, key: key + ".table", reason: "names a table of an earlier entry: one entry per table")
                }
                if copy.userColumn == copy.column || copy.filters.contains(where: { $0.column == copy.column || $0.column == copy.userColumn }) {
                    throw ConfigurationError(.invalidValue, key: key, reason: "column, user_column and the where columns must differ")
                }
            }
        }
    }
}
