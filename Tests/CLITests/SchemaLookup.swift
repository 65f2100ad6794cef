import Foundation
import TestSupport
import Testing

/// An identity server's own login lookup, run as its SQL: after the transfer, each Apple user is found under the
/// new subject as the same account, no longer under the old one, and the rows of other providers, realms or
/// tenants holding the same strings still lead where they led.
struct ServerLookup {
    /// SQL: the account (a users row's key) the server finds for an Apple sign-in carrying `sub`; empty when none.
    var apple: @Sendable (_ sub: String) -> String
    /// SQL: the account the server finds for `sub` in the other provider, realm or tenant that `Framework.addOther`
    /// filled with the Apple users' old identifiers; empty when none.
    var other: @Sendable (_ sub: String) -> String
    /// Further checks once every Apple user migrated (emails the scenario of `SchemaScenario` cannot check).
    var check: ((SchemaWorld) throws -> Void)? = nil

    /// Sign-ins (two users, each with concurrent first sign-ins) and the bulk exchange on `framework`'s tables,
    /// then the lookups, the rows Baton must not touch, and `check`.
    func run(_ framework: Framework) async throws {
        try await SchemaWorld.run(framework, apple: 4) { world in
            let people = world.people
            let untouched = try world.psql(framework.invariant)
            let accounts = try people.map { try world.psql(apple($0.oldSub)) }
            let others = try people.map { try world.psql(other($0.oldSub)) }
            #expect(!accounts.contains("") && Set(accounts).count == people.count, "\(accounts)")
            #expect(!others.contains("") && Set(others).isDisjoint(with: accounts), "\(others)")
            for person in people { #expect(try world.psql(apple(person.newSub)) == "", "no account under a new subject yet") }

            let csv = world.directory.path("transfers.csv")
            try (["old_sub,transfer_sub"] + people.map { "\($0.oldSub),\($0.transferSub)" }).joined(separator: "\n")
                .write(toFile: csv, atomically: true, encoding: .utf8)
            let imported = try await runBatonOffPool(["import", "transfers", csv, "--config", try world.configuration()])
            #expect(imported.status == 0, "\(imported.stderr)")

            try await world.serving { port in
                let tokens = try people.prefix(2).map { try world.token($0.id) }
                let answers = await withTaskGroup(of: SchemaHTTP.Answer.self) { group in
                    for token in tokens { for _ in 0..<4 { group.addTask { await SchemaHTTP.signIn(port: port, token: token) } } }
                    return await group.reduce(into: []) { $0.append($1) }
                }
                #expect(answers.allSatisfy { $0.status == 200 }, "\(answers)")
                #expect(answers.filter { $0.outcome == "migrated" }.count == 2, "\(answers)")
                #expect(answers.filter { $0.outcome == "current" }.count == 6, "\(answers)")
            }
            let exchange = try await runBatonOffPool(["exchange", "--config", try world.configuration()])
            #expect(exchange.status == 0, "\(exchange.stdout)\(exchange.stderr)")
            for person in people {
                #expect(try world.count("SELECT count(*) FROM baton.events WHERE kind = 'migrated' AND old_sub = '\(person.oldSub)'") == 1)
            }

            for (i, person) in people.enumerated() {
                #expect(try world.psql(apple(person.newSub)) == accounts[i], "user \(i) under the new subject")
                #expect(try world.psql(apple(person.oldSub)) == "", "user \(i) no longer under the old subject")
                #expect(try world.psql(other(person.oldSub)) == others[i], "the other row holding user \(i)'s old subject")
            }
            #expect(try world.psql(framework.invariant) == untouched, "other rows, columns and keys")
            try check?(world)
        }
    }
}

/// A unique index an identity server's tables lack and docs/schemas.md tells the operator to run.
struct MissingIndex {
    /// The statement, as the framework's DDL runs it (without `CONCURRENTLY`).
    var statement: String
    /// The start of `baton doctor`'s failing line without it.
    var failure: String

    /// `baton doctor` on `framework`'s tables without the index: that one check fails, with the statement in the form
    /// docs/schemas.md gives, and none once the index exists.
    func run(_ framework: Framework) async throws {
        var framework = framework
        framework.ddl = framework.ddl.replacingOccurrences(of: statement + ";", with: "")
        let documented = statement.replacingOccurrences(of: "INDEX ON", with: "INDEX CONCURRENTLY ON")
        let docs = try String(contentsOf: packageRoot.appendingPathComponent("docs/schemas.md"), encoding: .utf8)
        #expect(docs.contains(documented), "docs/schemas.md gives \(documented)")
        try await SchemaWorld.run(framework, apple: 1) { world in
            let doctor = try await runBatonOffPool(["doctor", "--config", try world.configuration()])
            let failed = doctor.stdout.split(separator: "\n").filter { $0.hasPrefix("FAIL") }.map(String.init)
            #expect(failed.count == 1 && failed[0].hasPrefix(failure), "\(doctor.stdout)")
            #expect(failed.first?.hasSuffix("; fix: " + documented) == true, "\(failed)")
            _ = try world.psql(statement)
            let fixed = try await runBatonOffPool(["doctor", "--config", try world.configuration()])
            #expect(!fixed.stdout.contains("FAIL"), "\(fixed.stdout)")
        }
    }
}
