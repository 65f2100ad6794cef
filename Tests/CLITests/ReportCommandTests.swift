import Foundation
import TestSupport
import Testing

/// A migrated database with 30 transfers (12 migrated, 18 unresolved) and a configuration naming it.
struct ReportFixture {
    let directory: KeyDirectory
    let databaseURL: String
    let config: String

    static func make() async throws -> ReportFixture {
        let directory = try KeyDirectory()
        let databaseURL = try TestDatabase.create("report_cli")
        try await migrateWithBaton(databaseURL)
        // i % 5 < 2 migrated by sign-in on Nov (i % 10 + 1); 2 pending; 3 failed; 4 unresolvable.
        _ = try TestDatabase.psql(databaseURL, """
            CREATE TABLE public.users (id bigserial PRIMARY KEY, apple_sub text NOT NULL UNIQUE, email text);
            INSERT INTO baton.transfers (old_sub, new_sub, state, method, attempts, last_error, migrated_at)
            SELECT 'old-' || lpad(i::text, 3, '0'),
                   CASE WHEN i % 5 < 2 THEN 'new-' || i END,
                   (ARRAY['migrated', 'migrated', 'pending', 'failed', 'unresolvable'])[i % 5 + 1],
                   CASE WHEN i % 5 < 2 THEN 'signin' WHEN i % 5 > 2 THEN 'exchange' END,
                   CASE WHEN i % 5 > 2 THEN 3 ELSE 0 END,
                   CASE WHEN i % 5 = 3 THEN 'Apple rejected the exchange, "invalid_client"' END,
                   CASE WHEN i % 5 < 2 THEN timestamptz '2026-11-01 12:00:00+00' + (i % 10) * interval '1 day' END
            FROM generate_series(1, 30) AS i;
            INSERT INTO public.users (apple_sub, email)
            SELECT COALESCE(new_sub, old_sub), 'user' || substr(old_sub, 5) || '@example.com' FROM baton.transfers ORDER BY old_sub;
            """)
        let tree: [String: Any] = [
            "database": ["url": databaseURL],
            "apple": [
                "client_ids": ["com.example.app"],
                "transfer": [
                    "client_id": "com.example.app",
                    "accepted_at": "2026-11-01T00:00:00Z",
                    "sender": ["team_id": "AAAAAAAAAA", "key_id": "KEYA000001", "private_key_path": "sender.p8"],
                    "recipient": ["team_id": "BBBBBBBBBB", "key_id": "KEYB000001", "private_key_path": "recipient.p8"],
                ],
            ],
            "legacy": ["table": "public.users", "key_column": "id", "subject_column": "apple_sub", "email_column": "email"],
        ]
        return ReportFixture(directory: directory, databaseURL: databaseURL, config: try directory.writeJSON("baton.json", tree))
    }

    func run(_ arguments: [String]) async throws -> ProcessResult {
        try await runBatonOffPool(["report", "--config", config, "--now", "2026-11-15T00:00:00Z"] + arguments)
    }
}

@Suite("baton report")
struct ReportCommandTests {
    @Test("table: the totals, the window, masked emails, 'and N more'")
    func table() async throws {
        let fixture = try await ReportFixture.make()
        defer { fixture.directory.remove() }
        let result = try await fixture.run(["--limit", "5"])
        #expect(result.status == 0, "\(result.stderr)")
        for expected in ["day 15 of 60, 46 days left", "40.0% migrated (12 of 30)", "  pending           6   20.0%",
                         "u***@example.com", "  and 13 more", "Apple rejected the exchange, \"invalid_client\""] {
            #expect(result.stdout.contains(expected), "missing '\(expected)' in:\n\(result.stdout)")
        }
        #expect(!result.stdout.contains("user003@example.com"))
    }

    @Test("csv: every unresolved user, masked unless --unmasked; --out creates a private file")
    func csv() async throws {
        let fixture = try await ReportFixture.make()
        defer { fixture.directory.remove() }
        let masked = try await fixture.run(["--format", "csv"])
        #expect(masked.status == 0, "\(masked.stderr)")
        let lines = masked.stdout.components(separatedBy: "\r\n").filter { !$0.isEmpty }
        #expect(lines.count == 19)
        #expect(lines.first == "legacy_key,old_sub,state,attempts,last_error,email,private_relay,step")
        #expect(lines[1] == "2,old-002,pending,0,,u***@example.com,false,transfer-ids")
        #expect(lines[2] == "3,old-003,failed,3,\"Apple rejected the exchange, \"\"invalid_client\"\"\",u***@example.com,false,transfer-ids")
        #expect(!masked.stdout.contains("user002@"))

        let out = fixture.directory.path("unresolved.csv")
        let unmasked = try await fixture.run(["--format", "csv", "--unmasked", "--out", out, "--limit", "2"])
        #expect(unmasked.status == 0, "\(unmasked.stderr)")
        #expect(unmasked.stdout == "report: wrote \(out) (csv)\n")
        let written = try String(contentsOfFile: out, encoding: .utf8)
        #expect(written == [
            "legacy_key,old_sub,state,attempts,last_error,email,private_relay,step",
            "2,old-002,pending,0,,user002@example.com,false,transfer-ids",
            #"3,old-003,failed,3,"Apple rejected the exchange, ""invalid_client""",user003@example.com,false,transfer-ids"#,
        ].map { $0 + "\r\n" }.joined())
        let mode = try FileManager.default.attributesOfItem(atPath: out)[.posixPermissions] as? Int
        #expect(mode == 0o600)
    }

    @Test("json reads as the report; html is written to a file")
    func jsonAndHTML() async throws {
        let fixture = try await ReportFixture.make()
        defer { fixture.directory.remove() }
        let json = try await fixture.run(["--format", "json"])
        #expect(json.status == 0, "\(json.stderr)")
        let object = try JSONSerialization.jsonObject(with: Data(json.stdout.utf8)) as? [String: Any]
        let totals = object?["totals"] as? [String: Int]
        #expect(totals == ["total": 30, "migrated": 12, "pending": 6, "failed": 6, "unresolvable": 6, "unmatched_signins": 0])
        let window = object?["window"] as? [String: Any]
        #expect(window?["days_left"] as? Int == 46)
        let unresolved = object?["unresolved"] as? [String: Any]
        #expect((unresolved?["users"] as? [Any])?.count == 18)

        let out = fixture.directory.path("report.html")
        let html = try await fixture.run(["--format", "html", "--out", out])
        #expect(html.status == 0, "\(html.stderr)")
        let page = try String(contentsOfFile: out, encoding: .utf8)
        #expect(page.hasPrefix("<!DOCTYPE html>"))
        #expect(page.contains("12 of 30"))
        #expect(!page.lowercased().contains("<script"))
        #expect(!page.contains("user002@example.com"))
    }

    @Test("usage and configuration errors exit 2; an unreachable database exits 1", arguments: [
        (["--format", "pdf"], Int32(2), "--format must be"),
        (["--format", "html", "--unmasked"], 2, "--unmasked applies to csv and json only"),
        (["--limit", "-1"], 2, "--limit must be"),
        (["--now", "yesterday"], 2, "--now must be ISO 8601"),
        (["extra"], 2, "unexpected argument"),
        (["--config", "/nonexistent/baton.json"], 2, "cannot read the configuration file"),
    ])
    func errors(arguments: [String], status: Int32, message: String) async throws {
        let fixture = try await ReportFixture.make()
        defer { fixture.directory.remove() }
        let result = try await runBatonOffPool(["report", "--config", fixture.config] + arguments)
        #expect(result.status == status)
        #expect(result.stderr.contains(message), "\(result.stderr)")
    }

    @Test("a database that cannot be reached exits 1 without printing its URL")
    func unreachable() async throws {
        let fixture = try await ReportFixture.make()
        defer { fixture.directory.remove() }
        let result = try await runBatonOffPool(["report", "--config", fixture.config],
                                               environment: ["BATON_DATABASE_URL": "postgresql://u:sekret@/nowhere?host=/nonexistent"])
        #expect(result.status == 1)
        #expect(result.stderr.hasPrefix("baton report: "))
        #expect(!result.stderr.contains("sekret"))
    }
}
