@testable import Baton
import BatonPostgres
import Testing

@Suite("LegacyStore.concatenate: placeholders renumbered, bindings kept in order")
struct QueryConcatenationTests {
    @Test("the second query's $n follow the first's bindings; text without placeholders is copied as is")
    func renumbers() {
        let first: PostgresQuery = "SELECT \("a"), \("b") FROM t WHERE x = \("c")"
        let second: PostgresQuery = " AND y = \("d") AND z IN (\("e"), \("f"), \("g"), \("h"), \("i"), \("j"), \("k")) -- é ünïcode"
        let joined = LegacyStore.concatenate(first, second)
        #expect(joined.sql == "SELECT $1, $2 FROM t WHERE x = $3 AND y = $4 AND z IN ($5, $6, $7, $8, $9, $10, $11) -- é ünïcode")
        #expect(joined.bindings.compactMap { $0.postgresValue().map { String(decoding: $0, as: UTF8.self) } } == ["a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k"])
        #expect(LegacyStore.concatenate(PostgresQuery(unsafeSQL: "SELECT 1"), second).sql == "SELECT 1" + second.sql)
        #expect(LegacyStore.concatenate(first, " LIMIT 1").sql == first.sql + " LIMIT 1")
        // A placeholder at the very end, and two digits renumbered past 9.
        let tail = LegacyStore.concatenate(first, PostgresQuery(unsafeSQL: " = $1 OR w = $12", Array(repeating: "v", count: 12)))
        #expect(tail.sql.hasSuffix(" = $4 OR w = $15"))
        #expect(tail.bindings.count == 15)
    }
}
