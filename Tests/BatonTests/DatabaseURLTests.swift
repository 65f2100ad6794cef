import Baton
import Foundation
import Testing

/// `database.url` in every form libpq accepts, checked by libpq (`PQconninfoParse`).
@Suite("database.url")
struct DatabaseURLTests {
    private func load(url: String) throws -> BatonConfiguration {
        let tree: [String: Any] = [
            "database": ["url": url],
            "apple": ["client_ids": ["com.example.app"]],
            "legacy": ["table": "public.users", "key_column": "id", "subject_column": "apple_sub", "email_column": "email"],
        ]
        return try BatonConfiguration.load(json: try JSONSerialization.data(withJSONObject: tree), baseDirectory: "/srv/baton", environment: [:])
    }

    @Test("a multi-host URI, key/value settings and a service are accepted", arguments: [
        "postgresql://postgres@127.0.0.1:5432,127.0.0.1:5433/app?target_session_attrs=read-write",
        "host=127.0.0.1,127.0.0.1 port=5432,5433 dbname=app target_session_attrs=read-write",
        "service=baton",
    ])
    func accepted(_ url: String) throws {
        #expect(try load(url: url).database.url == url)
    }

    @Test("a string libpq refuses is a configuration error naming the key, without the password")
    func refused() throws {
        do {
            _ = try load(url: "postgresql://baton:s3cret@db/app?no_such_setting=s3cret")
            Issue.record("accepted")
        } catch let error as ConfigurationError {
            #expect(error.key == "database.url")
            #expect(!"\(error)".contains("s3cret"), "\(error)")
        }
    }

    @Test("statement_timeout_ms 0 means none (behind PgBouncer); below 0 is refused")
    func statementTimeoutZero() throws {
        var configuration = try load(url: "postgresql:///app")
        configuration.database.statementTimeoutMilliseconds = 0
        #expect(throws: Never.self) { try configuration.validate() }
        configuration.database.statementTimeoutMilliseconds = -1
        #expect(throws: ConfigurationError.self) { try configuration.validate() }
    }
}
