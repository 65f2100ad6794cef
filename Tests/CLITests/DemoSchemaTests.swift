import Foundation
import TestSupport
import Testing

@Suite("baton demo --schema")
struct DemoSchemaTests {
    @Test("the story on a framework's tables: every user accounted for, other providers' rows untouched, tables dropped",
          arguments: ["allauth", "authjs", "better-auth", "supabase", "omniauth"])
    func schema(_ name: String) async throws {
        let databaseURL = try TestDatabase.create("demo_\(name)")
        let out = FileManager.default.temporaryDirectory.appendingPathComponent("demo-\(UUID().uuidString).html").path
        defer { try? FileManager.default.removeItem(atPath: out) }
        let result = try await runBatonOffPool(["demo", "--database-url", databaseURL, "--users", "60", "--concurrency", "4", "--stragglers", "0",
                                                "--schema", name, "--out", out])
        #expect(result.status == 0, "\(result.stdout)\n\(result.stderr)")
        #expect(result.stdout.contains("every user accounted for: 20 by sign-in + 40 by exchange + 0 unresolved = 60 of 60 users in"), "\(result.stdout)")
        #expect(result.stdout.contains("6 rows of another provider still carry the same subjects as migrated Apple users"))
        #expect(result.stdout.contains("now holds 60 team B identifiers"))
        #expect(result.stdout.contains("and schema baton from the database"))
        #expect(try TestDatabase.psql(databaseURL, "SELECT count(*) FROM pg_tables WHERE schemaname IN ('public', 'auth', 'baton')") == "0")
    }

    @Test("--cross-company: only keys and transfer identifiers reach team B's own database, and every user is accounted for there")
    func crossCompany() async throws {
        let databaseURL = try TestDatabase.create("demo_xco")
        let out = FileManager.default.temporaryDirectory.appendingPathComponent("demo-\(UUID().uuidString).html").path
        defer { try? FileManager.default.removeItem(atPath: out) }
        let result = try await runBatonOffPool(["demo", "--database-url", databaseURL, "--users", "60", "--concurrency", "4", "--stragglers", "0",
                                                "--cross-company", "--schema", "allauth", "--out", out])
        #expect(result.status == 0, "\(result.stdout)\n\(result.stderr)")
        #expect(result.stdout.contains("60 lines of key,transfer_sub; 0 team A identifiers and 0 relay addresses in it"), "\(result.stdout)")
        #expect(result.stdout.contains("60 rows in baton.transfers, none with an old_sub"))
        #expect(result.stdout.contains("every user accounted for: 20 by sign-in + 40 by exchange + 0 unresolved = 60 of 60 users in public.accounts"))
        #expect(result.stdout.contains("dropped the recipient's database"))
        #expect(try TestDatabase.psql(try TestDatabase.serverURL(), "SELECT count(*) FROM pg_database WHERE datname LIKE 'demo_xco%_recipient'") == "0")
    }

    @Test("an unknown --schema is a usage error")
    func unknown() async throws {
        let result = try await runBatonOffPool(["demo", "--database-url", "postgresql:///x", "--schema", "keycloak"])
        #expect(result.status == 2)
        #expect(result.stderr.contains("--schema must be users, allauth, authjs, better-auth, supabase or omniauth"))
    }
}
