import Foundation
import TestSupport
import Testing

/// `baton rollback` through the built binary, on each framework's own tables: an exchange rewrites every Apple user
/// (subject, emails, JSON copies, email copies), and the rollback puts every table of the application back byte for
/// byte, reopens the transfer rows, and lets the exchange run again.
@Suite("baton rollback: every framework's tables back as they were")
struct RollbackCommandTests {
    /// A digest of every row of every table outside Baton's schema and PostgreSQL's own.
    static func applicationTables(_ world: SchemaWorld) throws -> String {
        let tables = try world.psql("""
            SELECT string_agg(format('%I.%I', table_schema, table_name), ' ' ORDER BY table_schema, table_name) FROM information_schema.tables
            WHERE table_type = 'BASE TABLE' AND table_schema NOT IN ('baton', 'pg_catalog', 'information_schema')
            """).split(separator: " ")
        return try tables.map { table in
            "\(table) " + (try world.psql("SELECT coalesce(md5(string_agg(t::text, '|' ORDER BY t::text)), '-') || ' ' || count(*) FROM \(table) AS t"))
        }.joined(separator: "\n")
    }

    @Test("exchange, rollback --since with --dry-run then --yes: every table as before; again: nothing; the exchange runs again",
          arguments: ["allauth", "authjs", "better-auth", "omniauth", "supabase"])
    func frameworks(_ name: String) async throws {
        let framework = try #require([Framework.allauth, .authjs, .betterAuth, .omniauth, .supabase].first { $0.name == name })
        try await SchemaWorld.run(framework, apple: 3) { world in
            try world.addMissingSubjectIndex()
            let config = try world.configuration()
            let ids = try await runBatonOffPool(["transfer-ids", "--yes", "--rate", "100", "--config", config])
            #expect(ids.status == 0, "\(ids.stdout)\(ids.stderr)")
            let before = try Self.applicationTables(world)
            let start = ISO8601DateFormatter().string(from: Date().addingTimeInterval(-1))
            let exchange = try await runBatonOffPool(["exchange", "--config", config])
            #expect(exchange.stdout.contains("done 3,"), "\(exchange.stdout)\(exchange.stderr)")
            let migrated = try Self.applicationTables(world)
            #expect(migrated != before)

            let dryRun = try await runBatonOffPool(["rollback", "--since", start, "--dry-run", "--config", config])
            #expect(dryRun.status == 0 && dryRun.stdout.hasSuffix("would roll back 3\n"), "\(dryRun.stdout)\(dryRun.stderr)")
            #expect(try Self.applicationTables(world) == migrated, "a dry run changes nothing")

            let rollback = try await runBatonOffPool(["rollback", "--since", start, "--yes", "--config", config])
            #expect(rollback.status == 0 && rollback.stdout.hasSuffix("rolled back 3, refused 0\n"), "\(rollback.stdout)\(rollback.stderr)")
            #expect(try Self.applicationTables(world) == before)
            #expect(try world.count("SELECT count(*) FROM baton.transfers WHERE state = 'pending' AND new_sub IS NULL") == 3)
            #expect(try world.count("SELECT count(*) FROM baton.events WHERE kind = 'rolled_back'") == 3)

            let again = try await runBatonOffPool(["rollback", "--since", start, "--yes", "--config", config])
            #expect(again.status == 0 && again.stdout == "rolled back 0, refused 0\n", "\(again.stdout)")
            let exchangeAgain = try await runBatonOffPool(["exchange", "--config", config])
            #expect(exchangeAgain.stdout.contains("done 3,"), "\(exchangeAgain.stdout)\(exchangeAgain.stderr)")
            #expect(try Self.applicationTables(world) == migrated)
        }
    }

    @Test("a record the application changed after its migration is refused with the reason, exit 1; one record by its key")
    func refusedAndOneRecord() async throws {
        try await SchemaWorld.run(.allauth, apple: 2) { world in
            let config = try world.configuration()
            _ = try await runBatonOffPool(["transfer-ids", "--yes", "--rate", "100", "--config", config])
            _ = try await runBatonOffPool(["exchange", "--config", config])
            _ = try world.psql(world.framework.setEmail(0, "own@example.org"))
            let keys = try world.psql("SELECT string_agg(legacy_key, ' ' ORDER BY id) FROM baton.events WHERE kind = 'migrated'").split(separator: " ")
            #expect(keys.count == 2)
            var outcomes: [String] = []
            for key in keys {
                let result = try await runBatonOffPool(["rollback", "--legacy-key", String(key), "--yes", "--config", config])
                outcomes.append("\(result.status) \(result.stdout.split(separator: "\n").last ?? "")")
                if result.status == 1 { #expect(result.stdout.contains("its email changed since the migration"), "\(result.stdout)") }
            }
            #expect(outcomes.sorted() == ["0 rolled back 1, refused 0", "1 rolled back 0, refused 1"])
            let usage = try runBaton(["rollback", "--yes", "--config", config])
            #expect(usage.status == 2 && usage.stderr.contains("--legacy-key"), "\(usage.stderr)")
        }
    }
}
