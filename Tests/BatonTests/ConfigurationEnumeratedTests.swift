import Baton
import Foundation
import Testing

/// A minimal valid configuration with `value` at `path` (`database.pooler`), as JSON.
private func configuration(_ path: String, _ value: Any) throws -> Data {
    var tree: [String: Any] = [
        "database": ["url": "postgresql://baton@db.internal/app"],
        "apple": ["client_ids": ["com.example.app"]],
        "legacy": ["table": "public.users", "key_column": "id", "subject_column": "apple_sub", "email_column": "email"],
    ]
    let parts = path.split(separator: ".").map(String.init)
    var section = tree[parts[0]] as? [String: Any] ?? [:]
    section[parts[1]] = value
    tree[parts[0]] = section
    return try JSONSerialization.data(withJSONObject: tree)
}

private func load(_ json: Data, _ environment: [String: String] = [:]) throws -> BatonConfiguration {
    try BatonConfiguration.load(json: json, baseDirectory: "/srv/baton", environment: environment)
}

@Suite("Configuration: keys holding one of a few names")
struct ConfigurationEnumeratedTests {
    /// Every key whose value is one of a few names, the names in declaration order, and the error's reason.
    static let enumerated: [(path: String, names: [String], reason: String)] = [
        ("database.pooler", ["none", "session", "transaction"], "must be none, session or transaction"),
        ("legacy.email_policy", ["relay", "always", "never"], "must be relay, always or never"),
        ("legacy.on_duplicate", ["report", "merge"], "must be report or merge"),
    ]

    @Test("the declared keys with a fixed list of values are exactly these, and the documentation names each value")
    func declared() {
        let declared = BatonConfiguration.keys.filter { $0.allowedValues != nil }
        #expect(declared.map(\.path) == Self.enumerated.map(\.path))
        #expect(declared.map(\.allowedValues) == Self.enumerated.map(\.names))
        for key in declared {
            for name in key.allowedValues ?? [] {
                #expect(key.summary.contains("`\(name)`"), "docs/configuration.md's line for \(key.path) does not name \(name)")
            }
        }
    }

    @Test("a name not in the list, or not a string, names the key and lists the names, from the file and the environment",
          arguments: enumerated)
    func invalid(_ path: String, _ names: [String], _ reason: String) throws {
        let expected = ConfigurationError(.invalidValue, key: path, reason: reason)
        let variable = BatonConfiguration.environmentVariable(for: path)
        let cases: [(Data, [String: String])] = [
            (try configuration(path, "bogus"), [:]), (try configuration(path, 1), [:]), (try configuration(path, names[0]), [variable: "bogus"]),
        ]
        for (json, environment) in cases {
            let error = #expect(throws: ConfigurationError.self) { try load(json, environment) }
            #expect(error == expected)
            #expect(error?.description == "configuration: \(path) (\(variable)): \(reason)")
        }
    }

    @Test("each listed name loads, from the file and the environment", arguments: enumerated)
    func valid(_ path: String, _ names: [String], _ reason: String) throws {
        let variable = BatonConfiguration.environmentVariable(for: path)
        for name in names {
            let cases: [(Data, [String: String])] = [(try configuration(path, name), [:]), (try configuration(path, "bogus"), [variable: name])]
            for (json, environment) in cases {
                let loaded = try load(json, environment)
                let value: String? = switch path {
                case "database.pooler": loaded.database.pooler.rawValue
                case "legacy.email_policy": loaded.legacy.emailPolicy?.rawValue
                default: loaded.legacy.onDuplicate?.rawValue
                }
                #expect(value == name)
            }
        }
    }

    @Test("no key's error quotes its value or Swift's decoder text")
    func noDecoderText() throws {
        var refused: [String: String] = [:]
        for key in BatonConfiguration.keys where !key.isRecordMember {
            let parts = key.path.split(separator: ".").map(String.init)
            var tree: [String: Any] = [
                "database": ["url": "postgresql://baton@db.internal/app"],
                "apple": ["client_ids": ["com.example.app"]],
                "legacy": ["table": "public.users", "key_column": "id", "subject_column": "apple_sub"],
            ]
            func assign(_ object: inout [String: Any], _ index: Int) {
                if index == parts.count - 1 {
                    object[parts[index]] = "zz-not-a-value"
                    return
                }
                var child = object[parts[index]] as? [String: Any] ?? [:]
                assign(&child, index + 1)
                object[parts[index]] = child
            }
            assign(&tree, 0)
            do {
                _ = try load(try JSONSerialization.data(withJSONObject: tree))
            } catch let error as ConfigurationError {
                refused[key.path] = error.description
            }
        }
        #expect(Set(Self.enumerated.map(\.path)).isSubset(of: refused.keys))
        for (path, description) in refused {
            #expect(!description.contains("zz-not-a-value") && !description.contains("Cannot initialize"), "\(path): \(description)")
        }
    }
}
