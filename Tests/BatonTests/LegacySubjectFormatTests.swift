import BatonAppleSignIn
import BatonEmulator
import Baton
import BatonJobs
import BatonReport
import BatonPostgres
import Foundation
import TestSupport
import Testing

/// Ory Kratos' credential tables as its PostgreSQL migrations leave them (ory/kratos
/// persistence/sql/migrations/sql: `20210817181232000005_unique_credentials` and the later
/// `identity_credential_identifiers_identifier_nid_type_uq_idx`; columns as a `pg_dump` of a migrated v1 database),
/// holding two networks, an OIDC credential per identity with `<provider>:<sub>` identifiers, and a password
/// identifier spelled like an Apple `sub`.
private struct KratosFixture {
    static let network = "10000000-0000-0000-0000-000000000001"
    static let otherNetwork = "10000000-0000-0000-0000-000000000002"
    static let oidc = "20000000-0000-0000-0000-000000000001"
    static let password = "20000000-0000-0000-0000-000000000002"

    static let legacy = BatonConfiguration.Legacy(
        table: "public.identity_credential_identifiers", keyColumn: "id", subjectColumn: "identifier", emailColumn: nil,
        filters: ["nid": .equals(network), "identity_credential_type_id": .equals(oidc)], subjectFormat: "apple:{sub}")

    let url: String
    let pool: PostgresPool
    let store: LegacyStore

    init(_ name: String) async throws {
        url = try TestDatabase.create(name)
        pool = PostgresPool(url: url, maxConnections: 6, acquireTimeout: .seconds(30))
        _ = try await BatonSchema.migrator().migrate(pool)
        try await pool.withConnection { connection in
            try await connection.executeScript(unsafeSQL: """
                CREATE TABLE public.networks (id uuid PRIMARY KEY, created_at timestamp NOT NULL, updated_at timestamp NOT NULL);
                CREATE TABLE public.identities (id uuid PRIMARY KEY, schema_id varchar(2048) NOT NULL, traits jsonb NOT NULL,
                    created_at timestamp NOT NULL, updated_at timestamp NOT NULL, nid uuid REFERENCES public.networks (id) ON DELETE CASCADE,
                    state varchar(255) DEFAULT 'active' NOT NULL, state_changed_at timestamp);
                CREATE TABLE public.identity_credential_types (id uuid PRIMARY KEY, name varchar(32) NOT NULL);
                CREATE UNIQUE INDEX identity_credential_types_name_idx ON public.identity_credential_types (name);
                CREATE TABLE public.identity_credentials (id uuid PRIMARY KEY, config jsonb NOT NULL,
                    identity_credential_type_id uuid NOT NULL REFERENCES public.identity_credential_types (id) ON DELETE CASCADE,
                    identity_id uuid NOT NULL REFERENCES public.identities (id) ON DELETE CASCADE,
                    created_at timestamp NOT NULL, updated_at timestamp NOT NULL, nid uuid REFERENCES public.networks (id) ON DELETE CASCADE,
                    version integer DEFAULT 0 NOT NULL);
                CREATE TABLE public.identity_credential_identifiers (id uuid PRIMARY KEY, identifier varchar(255) NOT NULL,
                    identity_credential_id uuid NOT NULL REFERENCES public.identity_credentials (id) ON DELETE CASCADE,
                    created_at timestamp NOT NULL, updated_at timestamp NOT NULL, nid uuid REFERENCES public.networks (id) ON DELETE CASCADE,
                    identity_credential_type_id uuid NOT NULL REFERENCES public.identity_credential_types (id) ON DELETE CASCADE);
                CREATE UNIQUE INDEX identity_credential_identifiers_identifier_nid_type_uq_idx
                    ON public.identity_credential_identifiers (nid, identity_credential_type_id, identifier);
                CREATE INDEX identity_credential_identifiers_nid_i_ici_idx
                    ON public.identity_credential_identifiers (nid, identifier, identity_credential_id);
                INSERT INTO public.networks VALUES ('\(Self.network)', now(), now()), ('\(Self.otherNetwork)', now(), now());
                INSERT INTO public.identity_credential_types VALUES ('\(Self.oidc)', 'oidc'), ('\(Self.password)', 'password');
                """)
        }
        store = LegacyStore(pool: pool, legacy: try Self.legacy.identifiers())
    }

    /// An identity `n` (`…00n` keys) in `network` with one credential of `type` holding `identifiers`.
    func identity(_ n: Int, network: String = KratosFixture.network, type: String = KratosFixture.oidc, _ identifiers: [String]) async throws {
        let id = String(format: "30000000-0000-0000-0000-%012ld", n), credential = String(format: "40000000-0000-0000-0000-%012ld", n)
        try await pool.execute("""
            INSERT INTO public.identities (id, schema_id, traits, created_at, updated_at, nid)
            VALUES (\(id)::uuid, 'default', '{"email": "x@example.org"}', '2024-01-01', '2024-01-01', \(network)::uuid)
            """)
        try await pool.execute("""
            INSERT INTO public.identity_credentials (id, config, identity_credential_type_id, identity_id, created_at, updated_at, nid)
            VALUES (\(credential)::uuid, '{"providers": []}', \(type)::uuid, \(id)::uuid, '2024-01-01', '2024-01-01', \(network)::uuid)
            """)
        for (index, identifier) in identifiers.enumerated() {
            try await pool.execute("""
                INSERT INTO public.identity_credential_identifiers VALUES (\(Self.key(n, index))::uuid, \(identifier), \(credential)::uuid,
                    '2024-01-01', '2024-01-01', \(network)::uuid, \(type)::uuid)
                """)
        }
    }

    /// The key of identity `n`'s `index`th identifier row.
    static func key(_ n: Int, _ index: Int = 0) -> String { String(format: "50000000-0000-0000-0000-%08ld%04ld", n, index) }

    /// Kratos' own lookup of an OIDC identifier in the main network (its `FindByCredentialsIdentifier`, as SQL):
    /// the identity's number, or "none".
    func kratosLookup(_ identifier: String) throws -> String {
        try TestDatabase.psql(url, """
            SELECT coalesce(max(right(ic.identity_id::text, 3)), 'none') FROM public.identity_credentials ic
            JOIN public.identity_credential_types ict ON ict.id = ic.identity_credential_type_id
            JOIN public.identity_credential_identifiers ici ON ici.identity_credential_id = ic.id AND ici.identity_credential_type_id = ict.id
            WHERE ici.identifier = '\(identifier)' AND ic.nid = '\(Self.network)' AND ici.nid = '\(Self.network)' AND ict.name = 'oidc'
            """)
    }

    /// Every identifier row but the main network's OIDC rows starting with `apple:` (and the row `excluded`), as text.
    func others(excluding excluded: String = "") throws -> String {
        try TestDatabase.psql(url, """
            SELECT string_agg(i::text, ';' ORDER BY id) FROM public.identity_credential_identifiers i
            WHERE NOT (identifier LIKE 'apple:%' AND nid = '\(Self.network)' AND identity_credential_type_id = '\(Self.oidc)') AND id::text <> '\(excluded)'
            """)
    }

    func value(_ sql: String) throws -> String { try TestDatabase.psql(url, sql) }
}

@Suite("legacy.subject_format: a subject stored around the bare sub (Ory Kratos' apple:<sub>)")
struct LegacySubjectFormatTests {
    /// The main network's Apple users 1 and 2, Google and password rows holding their subjects, and another network's Apple user
    /// under the same subject.
    private func populated(_ name: String) async throws -> KratosFixture {
        let f = try await KratosFixture(name)
        try await f.identity(1, ["apple:old.1"])
        try await f.identity(2, ["apple:old.2"])
        try await f.identity(3, ["google:old.1", "github:apple:old.2"])
        try await f.identity(4, type: KratosFixture.password, ["old.1"])
        try await f.identity(5, network: KratosFixture.otherNetwork, ["apple:old.1"])
        return f
    }

    @Test("start-up accepts Kratos' own unique index; seeding reads bare subs; the engine's sign-in, a current user and a rollback work on apple:<sub>")
    func signInSeedRollBack() async throws {
        let f = try await populated("subject_format_signin")
        #expect(try await f.store.validateLegacyTable().failure == nil)
        let others = try f.others()

        // Seeding: only the main network's Apple rows, as bare subjects.
        #expect(try await LegacySeeder(pool: f.pool, legacy: f.store.legacy).preview().count == 2)
        #expect(try await LegacySeeder(pool: f.pool, legacy: f.store.legacy).seed() == 2)
        #expect(try f.value("SELECT string_agg(old_sub, ',' ORDER BY old_sub) FROM baton.transfers") == "old.1,old.2")
        try await f.pool.execute("UPDATE baton.transfers SET transfer_sub = 't.' || substr(old_sub, 5)")
        // `baton export` joins the rows to baton.transfers by their bare subject.
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("subject-format-export-\(UUID().uuidString).csv").path
        defer { try? FileManager.default.removeItem(atPath: path) }
        #expect(try await TransferExporter(pool: f.pool, legacy: f.store.legacy, columns: []).export(to: path).rows == 2)
        #expect(try String(contentsOfFile: path, encoding: .utf8) == "key,transfer_sub\n\(KratosFixture.key(1)),t.1\n\(KratosFixture.key(2)),t.2\n")

        #expect(try await f.store.lookupBySubject("old.1") == LegacyUser(key: KratosFixture.key(1), subject: "old.1", email: nil))
        #expect(try await f.store.lookupBySubject("apple:old.1") == nil)
        #expect(try await f.store.oldSubject(forTransferSubject: "t.1") == "old.1")
        #expect(CredentialState(try await f.store.credentialFacts(of: "old.1"), transferAccepted: true) != .notFound)

        // The engine's sign-in under the new team's identifier, found through the transfer identifier.
        let driver = SignInDriver(store: f.store, now: { Date() })
        let identity = VerifiedIdentity(sub: "new.1", transferSub: "t.1")
        let result = try await driver.run(.signIn(identity, nonce: nil, emailPolicy: f.store.emailPolicy))
        #expect(result.outcome == .migrated)
        #expect(result.user == LegacyUser(key: KratosFixture.key(1), subject: "new.1", email: nil))
        #expect(try f.kratosLookup("apple:new.1") == "001")
        #expect(try f.kratosLookup("apple:old.1") == "none")
        #expect(try f.value("SELECT old_sub || ' ' || new_sub || ' ' || state FROM baton.transfers WHERE transfer_sub = 't.1'") == "old.1 new.1 migrated")
        #expect(try f.others() == others)
        let again = try await driver.run(.signIn(VerifiedIdentity(sub: "new.1"), nonce: nil, emailPolicy: f.store.emailPolicy))
        #expect(again.outcome == .current && again.user?.key == KratosFixture.key(1))
        // The report finds the row of the user still waiting by its stored form.
        let report = try await ReportBuilder(pool: f.pool, legacy: KratosFixture.legacy, acceptedAt: nil).build()
        #expect(report.unresolved.users.map { "\($0.legacyKey ?? "-") \($0.oldSub)" } == ["\(KratosFixture.key(2)) old.2"])

        // The rollback puts the stored form back.
        let migration = try #require(try await f.store.migrations(legacyKey: KratosFixture.key(1), since: nil).first)
        #expect(migration.oldSub == "old.1" && migration.newSub == "new.1")
        #expect(try await f.store.rollBack(migration) == .rolledBack)
        #expect(try f.kratosLookup("apple:old.1") == "001")
        #expect(try f.kratosLookup("apple:new.1") == "none")
        #expect(try f.others() == others)
        await f.pool.close()
    }

    @Test("a duplicate Kratos made under apple:<new sub> is recorded and merged onto the legacy row")
    func duplicate() async throws {
        let f = try await populated("subject_format_duplicate")
        // A re-link takes the bare subject of an Apple row, never its stored form nor another provider's.
        #expect(try await f.store.linkableSubject(legacySubject: "old.1", currentSubject: "new.9") == "old.1")
        #expect(try await f.store.linkableSubject(legacySubject: "apple:old.1", currentSubject: "new.9") == nil)
        try await f.pool.execute("INSERT INTO baton.transfers (old_sub, transfer_sub) VALUES ('old.2', 't.2')")
        try await f.identity(6, ["apple:new.2"])
        let others = try f.others(excluding: KratosFixture.key(6))
        let recorded = try await f.store.recordDuplicate(newSub: "new.2", oldSub: nil, transferSub: "t.2", foundBy: .signin)
        let pair = DuplicatePair(freshKey: KratosFixture.key(6), legacyKey: KratosFixture.key(2))
        #expect(recorded?.pair == pair && recorded?.isNew == true)
        let merged = try await f.store.mergeDuplicate(pair)
        #expect(merged?.user == LegacyUser(key: KratosFixture.key(2), subject: "new.2", email: nil))
        #expect(try f.kratosLookup("apple:new.2") == "002")
        #expect(try f.kratosLookup("apple:old.2") == "none")
        // The fresh row's identifier (NOT NULL) is released: no longer an Apple identifier.
        let released = try #require(merged?.releasedSubject)
        #expect(!released.hasPrefix("apple:") && released.hasSuffix("apple:new.2"), "\(released)")
        #expect(try f.value("SELECT identifier FROM public.identity_credential_identifiers WHERE id = '\(KratosFixture.key(6))'") == released)
        #expect(try f.others(excluding: KratosFixture.key(6)) == others)
        await f.pool.close()
    }

    @Test("the exchange against the emulator rewrites every apple:<sub> to apple:<new sub> once; Google's rows under the same subs stay")
    func exchange() async throws {
        try await withEmulator { emulator in
            let transfer = try EmulatedTransfer(on: emulator, users: 6)
            let f = try await KratosFixture("subject_format_exchange")
            for (index, user) in transfer.users.enumerated() {
                try await f.identity(index + 1, ["apple:" + user.userIdentifier, "google:" + user.userIdentifier])
            }
            let others = try f.others()
            #expect(try await LegacySeeder(pool: f.pool, legacy: f.store.legacy).seed() == 6)
            for (old, transferSub) in transfer.transferIdentifiers {
                try await f.pool.execute("UPDATE baton.transfers SET transfer_sub = \(transferSub) WHERE old_sub = \(old)")
            }
            let secret = try ClientSecret(teamID: transfer.recipient.teamID, keyID: transfer.recipient.keyID, clientID: EmulatedTransfer.clientID,
                                          pem: transfer.recipient.privateKeyPEM)
            let client = AppleClient(baseURL: emulator.baseURL, credentials: secret,
                                     options: AppleClient.Options(requestTimeout: 10, retry: RetryPolicy(maxAttempts: 1)), now: { emulator.now })
            let job = BulkJob(queue: TransferQueue(pool: f.pool, kind: .exchange, leaseSeconds: 30, retryBaseSeconds: 0.2),
                              step: ExchangeStep(client: client, applier: f.store), options: BulkJobOptions(workers: 3, rate: 500),
                              window: TransferWindow(acceptedAt: transfer.acceptedAt), requireOpenWindow: true, now: { Date() })
            let summary = await job.run()
            #expect(summary.stopReason == nil && summary.counts.succeeded == 6)
            #expect(try f.value("""
                SELECT count(*) FROM public.identity_credential_identifiers i JOIN baton.transfers t ON i.identifier = 'apple:' || t.new_sub
                WHERE t.state = 'migrated' AND t.new_sub <> t.old_sub
                """) == "6")
            #expect(try f.value("SELECT count(*) FROM baton.events WHERE kind = 'migrated'") == "6")
            #expect(try f.others() == others)
            await f.pool.close()
        }
    }

    @Test("baton doctor's malformed-subject check reads the bare sub of apple:<sub>")
    func problems() async throws {
        let f = try await KratosFixture("subject_format_problems")
        try await f.identity(1, ["apple:001234.0123456789abcdef0123456789abcdef.1234"])
        try await f.identity(2, ["apple:not-a-sub"])
        try await f.identity(3, ["google:also-not-a-sub"])
        let malformed = try await f.store.findProblems().first { $0.kind == .subjectMalformed }
        #expect(malformed?.count == 1 && malformed?.examples == [KratosFixture.key(2)])
        await f.pool.close()
    }

    @Test("legacy.subject_format must hold {sub} exactly once; it is split into the text around it")
    func configuration() throws {
        func identifiers(_ format: String?) throws -> BatonConfiguration.LegacyIdentifiers {
            var legacy = KratosFixture.legacy
            legacy.subjectFormat = format
            return try legacy.identifiers()
        }
        for bad in ["apple:", "{sub}:{sub}", "apple:{SUB}", "a\u{0}{sub}"] {
            let error = #expect(throws: ConfigurationError.self) { try identifiers(bad) }
            #expect(error?.key == "legacy.subject_format", "\(bad)")
        }
        let prefixed = try identifiers("apple:{sub}")
        #expect(prefixed.subjectPrefix == "apple:" && prefixed.subjectSuffix == "")
        let around = try identifiers("<{sub}>")
        #expect(around.subjectPrefix == "<" && around.subjectSuffix == ">")
        #expect(try identifiers(nil).subjectPrefix == "" && identifiers("{sub}").subjectSuffix == "")
        let json = #"{"database": {"url": "postgresql://localhost/x"}, "apple": {"client_ids": ["com.example.app"]}, "legacy": {"table": "t", "key_column": "id", "subject_column": "sub", "subject_format": "apple:{sub}"}}"#
        #expect(try BatonConfiguration.load(json: Data(json.utf8), baseDirectory: "/", environment: [:]).legacy.subjectFormat == "apple:{sub}")
        let fromEnvironment = try BatonConfiguration.load(json: Data(json.utf8), baseDirectory: "/", environment: ["BATON_LEGACY_SUBJECT_FORMAT": "{sub}"])
        #expect(fromEnvironment.legacy.subjectFormat == "{sub}")
    }
}
