import BatonPostgres

/// A unique index (or constraint) of a table as the catalog describes it: its key columns (INCLUDE columns left
/// out) and, for a partial index, its predicate as `pg_get_expr(indpred, indrelid)` prints it.
struct UniqueIndex: Sendable, Equatable {
    /// The index's name.
    var name: String
    /// Its key columns.
    var columns: Set<String>
    /// Its predicate, for a partial index.
    var predicate: String?
}

extension BatonConfiguration.LegacyIdentifiers {
    /// The columns the filters hold to one value (an equality, or an `in` of one value).
    var fixedColumns: Set<String> {
        Set(filters.filter { $0.condition.fixedValue != nil }.map(\.column.name))
    }

    /// Whether `index` makes `column` unique among the rows the filters select: its key columns are `column` and
    /// columns the filters hold to one value, and its predicate, if any, is implied by the filters
    /// (``IndexPredicate``; a term requiring `column` itself non-NULL always is, since NULLs never collide). Any doubt
    /// answers no.
    func makesUnique(_ column: PostgresIdentifier, by index: UniqueIndex) -> Bool {
        guard index.columns.contains(column.name), index.columns.isSubset(of: fixedColumns.union([column.name])) else { return false }
        guard let predicate = index.predicate else { return true }
        guard let terms = IndexPredicate.terms(of: predicate) else { return false }
        return terms.allSatisfy { term in
            if term.column == column.name, term.test == .notNull { return true }
            return filters.contains { $0.column.name == term.column && term.test.isImplied(by: $0.condition) }
        }
    }

    /// The statement creating the unique index Baton needs for the subject: over the subject column
    /// (``uniqueIndexStatement(over:concurrently:)``), or, for a subject inside JSON (`legacy.subject_path`), over the
    /// columns the filters hold to one value and the subject's expression, partial on the other filters.
    func subjectIndexStatement(concurrently: Bool = true) -> String {
        guard subjectPath != nil else { return uniqueIndexStatement(over: subjectColumn, concurrently: concurrently) }
        return uniqueIndexStatement(last: "(\(subjectValueSQL(alias: "")))", concurrently: concurrently)
    }

    /// The statement creating the unique index ``makesUnique(_:by:)`` accepts for `column`: over the columns the
    /// filters hold to one value and `column`, partial on the other filters.
    func uniqueIndexStatement(over column: PostgresIdentifier, concurrently: Bool = true) -> String {
        uniqueIndexStatement(last: column.quoted, except: column, concurrently: concurrently)
    }

    /// `CREATE UNIQUE INDEX` over the columns the filters hold to one value (but `except`) and then `last`, partial on
    /// the other filters.
    private func uniqueIndexStatement(last: String, except: PostgresIdentifier? = nil, concurrently: Bool) -> String {
        let fixed = fixedColumns
        let columns = filters.filter { fixed.contains($0.column.name) && $0.column != except }.map(\.column.quoted) + [last]
        let partial = filters.filter { !fixed.contains($0.column.name) }.map(\.literalSQL)
        return "CREATE UNIQUE INDEX\(concurrently ? " CONCURRENTLY" : "") ON \(table.quoted) (\(columns.joined(separator: ", ")))"
            + (partial.isEmpty ? "" : " WHERE " + partial.joined(separator: " AND "))
    }
}

/// A partial index's predicate, read conservatively: a conjunction of terms each testing one column against
/// literals, as PostgreSQL prints them (`((apple)::text <> ''::text)`, `(provider = ANY (ARRAY['a'::text, 'b'::text]))`,
/// `("providerSub" IS NOT NULL)`); casts are dropped. Anything else (OR, functions, other operators) is not read.
enum IndexPredicate {
    /// One term: a column and its test.
    struct Term: Equatable {
        var column: String
        var test: Test
    }

    /// What a term requires of its column.
    enum Test: Equatable {
        case notNull
        case equals(String)
        case notEquals(String)
        case oneOf(Set<String>)

        /// Whether every row passing `condition` on the column passes this test (a NULL passes no condition).
        func isImplied(by condition: LegacyCondition) -> Bool {
            switch (self, condition) {
            case (.notNull, _): true
            case (.equals(let value), .equals(let held)): held == value
            case (.equals(let value), .oneOf(let held)): held.allSatisfy { $0 == value }
            case (.notEquals(let value), .equals(let held)): held != value
            case (.notEquals(let value), .notEquals(let held)): held == value
            case (.notEquals(let value), .oneOf(let held)): !held.contains(value)
            case (.oneOf(let values), .equals(let held)): values.contains(held)
            case (.oneOf(let values), .oneOf(let held)): Set(held).isSubset(of: values)
            case (.equals, _), (.notEquals, _), (.oneOf, _): false
            }
        }
    }

    /// The terms of `predicate`, or nil when it is not a conjunction of terms this reader knows.
    static func terms(of predicate: String) -> [Term]? {
        guard var parser = Parser(predicate) else { return nil }
        guard let terms = parser.conjunction(), parser.atEnd else { return nil }
        return terms
    }

    fileprivate enum Token: Equatable {
        case identifier(String)
        case keyword(String)
        case literal(String)
        case symbol(String)
    }

    private struct Parser {
        private var tokens: [Token]
        private var position = 0

        var atEnd: Bool { position == tokens.count }

        init?(_ text: String) {
            guard let tokens = Self.tokenize(Array(text.unicodeScalars)) else { return nil }
            self.tokens = tokens
        }

        /// `term (AND term)*`.
        mutating func conjunction() -> [Term]? {
            var terms: [Term] = []
            repeat {
                guard let more = term() else { return nil }
                terms += more
            } while take(.keyword("AND"))
            return terms
        }

        /// A comparison, or a parenthesized conjunction.
        private mutating func term() -> [Term]? {
            let start = position
            if let comparison = comparison() { return [comparison] }
            position = start
            guard take(.symbol("(")), let terms = conjunction(), take(.symbol(")")) else { return nil }
            return terms
        }

        private mutating func comparison() -> Term? {
            guard let left = operand() else { return nil }
            if take(.keyword("IS")) {
                guard case .identifier(let column) = left, take(.keyword("NOT")), take(.keyword("NULL")) else { return nil }
                return Term(column: column, test: .notNull)
            }
            guard case .symbol(let op)? = next(), ["=", "<>", "!="].contains(op) else { return nil }
            if op == "=", take(.keyword("ANY")) {
                guard case .identifier(let column) = left, take(.symbol("(")), let values = array(), take(.symbol(")")) else { return nil }
                return Term(column: column, test: .oneOf(values))
            }
            guard let right = operand() else { return nil }
            let pair: (String, String)
            switch (left, right) {
            case (.identifier(let column), .literal(let value)), (.literal(let value), .identifier(let column)): pair = (column, value)
            default: return nil
            }
            return Term(column: pair.0, test: op == "=" ? .equals(pair.1) : .notEquals(pair.1))
        }

        /// `ARRAY[literal, …]`, possibly parenthesized.
        private mutating func array() -> Set<String>? {
            if take(.symbol("(")) {
                guard let values = array(), take(.symbol(")")) else { return nil }
                return values
            }
            guard take(.keyword("ARRAY")), take(.symbol("[")) else { return nil }
            var values: Set<String> = []
            repeat {
                guard case .literal(let value)? = next() else { return nil }
                values.insert(value)
            } while take(.symbol(","))
            return take(.symbol("]")) ? values : nil
        }

        /// A column or a literal, possibly parenthesized.
        private mutating func operand() -> Token? {
            if take(.symbol("(")) {
                guard let inner = operand(), take(.symbol(")")) else { return nil }
                return inner
            }
            switch next() {
            case let token? where token.isOperand: return token
            default: return nil
            }
        }

        private mutating func next() -> Token? {
            guard position < tokens.count else { return nil }
            defer { position += 1 }
            return tokens[position]
        }

        private mutating func take(_ token: Token) -> Bool {
            guard position < tokens.count, tokens[position] == token else { return false }
            position += 1
            return true
        }

        private static let keywords: Set<String> = ["AND", "OR", "NOT", "IS", "NULL", "ANY", "ALL", "ARRAY", "TRUE", "FALSE"]

        /// The tokens of `text`, casts (`::type`, `::character varying[]`) left out; nil on anything unexpected.
        private static func tokenize(_ text: [Unicode.Scalar]) -> [Token]? {
            var tokens: [Token] = []
            var index = 0
            func isWord(_ c: Unicode.Scalar) -> Bool { c == "_" || c == "$" || c.properties.isAlphabetic || ("0"..."9").contains(c) }
            /// The text up to the closing `delimiter` (doubled: itself), read from `index` and past it; nil when unclosed.
            func quoted(_ delimiter: Unicode.Scalar, backslashEscapes: Bool) -> String? {
                var value = ""
                while index < text.count {
                    if text[index] == delimiter {
                        guard index + 1 < text.count, text[index + 1] == delimiter else { index += 1; return value }
                        index += 1
                    } else if backslashEscapes, text[index] == "\\" {
                        guard index + 1 < text.count, ["\\", "'"].contains(text[index + 1]) else { return nil }
                        index += 1
                    }
                    value.unicodeScalars.append(text[index])
                    index += 1
                }
                return nil
            }
            while index < text.count {
                let c = text[index]
                if c.properties.isWhitespace {
                    index += 1
                } else if c == "'" || (c == "E" && index + 1 < text.count && text[index + 1] == "'") {
                    index += c == "E" ? 2 : 1
                    guard let value = quoted("'", backslashEscapes: c == "E") else { return nil }
                    tokens.append(.literal(value))
                } else if c == "\"" {
                    index += 1
                    guard let name = quoted("\"", backslashEscapes: false) else { return nil }
                    tokens.append(.identifier(name))
                } else if ("0"..."9").contains(c) || (c == "-" && index + 1 < text.count && ("0"..."9").contains(text[index + 1]) && tokens.last?.isOperand != true) {
                    var number = String(c)
                    index += 1
                    while index < text.count, ("0"..."9").contains(text[index]) || text[index] == "." { number.unicodeScalars.append(text[index]); index += 1 }
                    tokens.append(.literal(number))
                } else if isWord(c) {
                    var word = ""
                    while index < text.count, isWord(text[index]) { word.unicodeScalars.append(text[index]); index += 1 }
                    tokens.append(keywords.contains(word.uppercased()) ? .keyword(word.uppercased()) : .identifier(word))
                } else if c == ":", index + 1 < text.count, text[index + 1] == ":" {
                    // A cast: skip the type's words (`character varying`, `public.kind`), a modifier and `[]`.
                    index += 2
                    var words = 0
                    while index < text.count {
                        while index < text.count, text[index].properties.isWhitespace { index += 1 }
                        guard index < text.count else { break }
                        if text[index] == "\"" {
                            guard let end = text[(index + 1)...].firstIndex(of: "\"") else { return nil }
                            index = end + 1
                        } else if isWord(text[index]) {
                            var end = index
                            var word = ""
                            while end < text.count, isWord(text[end]) { word.unicodeScalars.append(text[end]); end += 1 }
                            if keywords.contains(word.uppercased()) { break }
                            index = end
                        } else if text[index] == ".", words > 0 {
                            index += 1
                            continue
                        } else {
                            break
                        }
                        words += 1
                    }
                    guard words > 0 else { return nil }
                    if index < text.count, text[index] == "(" {
                        guard let end = text[index...].firstIndex(of: ")") else { return nil }
                        index = end + 1
                    }
                    while index + 1 < text.count, text[index] == "[", text[index + 1] == "]" { index += 2 }
                } else if "()[],".unicodeScalars.contains(c) {
                    tokens.append(.symbol(String(c)))
                    index += 1
                } else if "=<>!".unicodeScalars.contains(c) {
                    var op = ""
                    while index < text.count, "=<>!~+-*/%^&|#@".unicodeScalars.contains(text[index]) { op.unicodeScalars.append(text[index]); index += 1 }
                    tokens.append(.symbol(op))
                } else {
                    return nil
                }
            }
            return tokens
        }
    }
}

private extension IndexPredicate.Token {
    var isOperand: Bool {
        switch self {
        case .identifier, .literal: true
        case .keyword, .symbol: false
        }
    }
}
