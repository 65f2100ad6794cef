import Baton
import BatonPostgres
import Foundation
import TestSupport
import Testing

@Suite("The migration statement kept per kind of source")
struct MigrationTemplateTests {
    /// The shapes the statement is built for: each framework's sample and two single-table ones.
    static func legacies() throws -> [(String, BatonConfiguration.LegacyIdentifiers)] {
        var result: [(String, BatonConfiguration.LegacyIdentifiers)] = []
        for name in ["allauth", "authjs", "better-auth", "supabase", "omniauth"] {
            let path = packageRoot.appendingPathComponent("sample-config/\(name).json").path
            let configuration = try BatonConfiguration.load(path: path, environment: ["BATON_ADMIN_TOKEN": "sample-admin-token-123"])
            result.append((name, try configuration.legacy.identifiers()))
        }
        let users = BatonConfiguration.Legacy(table: "public.users", keyColumn: "id", subjectColumn: "apple_sub", emailColumn: "email",
                                              transferColumn: "transfer_sub")
        result.append(("users", try users.identifiers()))
        let identities = BatonConfiguration.Legacy(
            table: "public.Identity", keyColumn: "id", subjectColumn: "providerSub", emailColumn: "mail", transferColumn: nil,
            filters: ["provider": "apple", "kind": "oauth"], json: LegacyJSONCopy(column: "claims", subjectKeys: ["sub", "id"], emailKeys: ["email"]),
            emailPolicy: .always)
        result.append(("identities", try identities.identifiers()))
        return result
    }

    @Test("same text and bindings (values and types) as the statement built from its fragments, for every shape and argument")
    func sameAsBuilt() throws {
        let pool = PostgresPool(url: "postgresql:///unused?host=/nonexistent")
        for (name, legacy) in try Self.legacies() {
            let store = LegacyStore(pool: pool, legacy: legacy)
            for source in [LegacyStore.OldSubjectSource.subject("000001.old.0001"), .transfer("t.000001")] {
                for newEmail in [nil, "x@privaterelay.appleid.com"] as [String?] {
                    for isPrivateEmail in [nil, true, false] as [Bool?] {
                        for transferSub in [nil, "t.000001"] as [String?] {
                            for method in [MigrationMethod.signin, .exchange, .link] {
                                for writeEmail in [true, false] {
                                    let kept = store.migrationQuery(from: source, newSub: "000002.new.0002", newEmail: newEmail, isPrivateEmail: isPrivateEmail,
                                                                    transferSub: transferSub, method: method, writeEmail: writeEmail)
                                    let built = store.buildMigrationQuery(from: source, newSub: "000002.new.0002", newEmail: newEmail, isPrivateEmail: isPrivateEmail,
                                                                          transferSub: transferSub, methodText: method.rawValue, writeEmail: writeEmail)
                                    #expect(kept.sql == built.sql, "\(name)")
                                    #expect(kept.bindings.count == built.bindings.count, "\(name)")
                                    for (a, b) in zip(kept.bindings, built.bindings) {
                                        #expect(type(of: a) == type(of: b) && a.postgresValue() == b.postgresValue(), "\(name): \(a) vs \(b)")
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}
