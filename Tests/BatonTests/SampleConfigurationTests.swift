import Baton
import Foundation
import TestSupport
import Testing

@Suite("Sample configurations per framework")
struct SampleConfigurationTests {
    @Test("each framework's sample loads, and docs/schemas.md and sample-config/README.md link it", arguments: [
        "allauth", "authjs", "better-auth", "supabase", "omniauth", "hanko", "nhost", "keycloak", "authentik", "gitea",
    ])
    func sample(_ name: String) throws {
        let path = packageRoot.appendingPathComponent("sample-config/\(name).json").path
        let configuration = try BatonConfiguration.load(path: path, environment: ["BATON_ADMIN_TOKEN": "sample-admin-token-123"])
        let legacy = try configuration.legacy.identifiers()
        #expect(!legacy.filters.isEmpty, "a multi-provider table needs legacy.where")
        #expect(legacy.emailTable != nil && legacy.emailColumn == nil)
        #expect(legacy.emailPolicy == .relay)
        #expect(configuration.apple.legacyClientIDs.isEmpty)
        for document in ["docs/schemas.md", "sample-config/README.md"] {
            let text = try String(contentsOf: packageRoot.appendingPathComponent(document), encoding: .utf8)
            #expect(text.contains("\(name).json"), "\(document) misses \(name).json")
        }
    }

    @Test("legacy.where, legacy.email and legacy.json come from the environment too")
    func environment() throws {
        let configuration = try BatonConfiguration.load(json: Data("{}".utf8), baseDirectory: "/", environment: [
            "BATON_DATABASE_URL": "postgresql:///app?host=/tmp",
            "BATON_APPLE_CLIENT_IDS": "com.example.app",
            "BATON_LEGACY_TABLE": "auth.identities",
            "BATON_LEGACY_KEY_COLUMN": "id",
            "BATON_LEGACY_SUBJECT_COLUMN": "provider_id",
            "BATON_LEGACY_WHERE": "provider=apple",
            "BATON_LEGACY_EMAIL_TABLE": "auth.users",
            "BATON_LEGACY_EMAIL_TABLE_COLUMN": "email",
            "BATON_LEGACY_EMAIL_KEY_COLUMN": "id",
            "BATON_LEGACY_EMAIL_REFERENCE_COLUMN": "user_id",
            "BATON_LEGACY_JSON_COLUMN": "identity_data",
            "BATON_LEGACY_JSON_SUBJECT_KEYS": "sub,provider_id",
            "BATON_LEGACY_EMAIL_POLICY": "never",
        ])
        let legacy = try configuration.legacy.identifiers()
        #expect(legacy.filters.map(\.condition) == [.equals("apple")])
        #expect(legacy.emailTable?.referenceColumn.name == "user_id")
        #expect(legacy.json?.subjectKeys == ["sub", "provider_id"])
        #expect(legacy.emailPolicy == .never)
    }

    @Test("contradictory legacy sections are refused naming the key", arguments: [
        ("legacy.email", #"{"table":"u","key_column":"id","subject_column":"sub","email_column":"email","email":{"table":"a","column":"e","key_column":"id","reference_column":"uid"}}"#),
        ("legacy.where", #"{"table":"u","key_column":"id","subject_column":"sub","where":{"sub":"apple"}}"#),
        ("legacy.json.column", #"{"table":"u","key_column":"id","subject_column":"sub","json":{"column":"sub"}}"#),
        ("legacy.json.subject_keys", #"{"table":"u","key_column":"id","subject_column":"sub","json":{"column":"j","subject_keys":[""]}}"#),
        ("legacy.email_policy", #"{"table":"u","key_column":"id","subject_column":"sub","email_policy":"sometimes"}"#),
    ])
    func refused(_ key: String, _ legacy: String) throws {
        let json = #"{"database":{"url":"postgresql:///app"},"apple":{"client_ids":["com.example.app"]},"legacy":"# + legacy + "}"
        let error = #expect(throws: ConfigurationError.self) {
            try BatonConfiguration.load(json: Data(json.utf8), baseDirectory: "/", environment: [:])
        }
        #expect(error?.key == key, "\(String(describing: error))")
    }

    @Test("the email policy: relay replaces only relay addresses, always any other, never none")
    func policy() {
        #expect(EmailPolicy.relay.allowsReplacing("a@privaterelay.appleid.com", with: "b@privaterelay.appleid.com"))
        #expect(EmailPolicy.relay.allowsReplacing("A@PrivateRelay.AppleID.com", with: "b@x.org"))
        #expect(!EmailPolicy.relay.allowsReplacing("me@example.com", with: "b@privaterelay.appleid.com"))
        #expect(!EmailPolicy.relay.allowsReplacing(nil, with: "b@privaterelay.appleid.com"))
        #expect(EmailPolicy.always.allowsReplacing("me@example.com", with: "b@x.org"))
        #expect(!EmailPolicy.always.allowsReplacing("b@x.org", with: "b@x.org"))
        #expect(!EmailPolicy.never.allowsReplacing("a@privaterelay.appleid.com", with: "b@x.org"))
    }
}
