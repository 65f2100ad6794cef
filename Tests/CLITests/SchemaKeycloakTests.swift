import Foundation
import TestSupport
import Testing

/// Keycloak: `federated_identity (identity_provider, realm_id, federated_user_id, federated_username, token, user_id)`
/// with the primary key `(identity_provider, user_id)` and no unique index over the subject; the email in
/// `user_entity.email`, with `email_constraint` beside it (the same address while the realm forbids duplicate
/// emails), unique per realm. As keycloak/keycloak's Liquibase changelogs
/// (model/jpa/src/main/resources/META-INF/jpa-changelog-*.xml, from 1.2.0.Beta1's FEDERATED_IDENTITY on) leave them in
/// Keycloak 26, names taken from a pg_dump of a Keycloak 26 database (PostgreSQL 17). Then the unique index
/// docs/schemas.md tells the operator to run for a database with several realms (without `CONCURRENTLY`, which the
/// test's single transaction refuses). A second realm with the same
/// `apple` alias holds Apple rows with the Apple users' old identifiers; Google rows of the first their new ones.
extension Framework {
    static let keycloakRealm = "0b6c3f44-1a2e-4d4e-9a55-1d7a7c0e0001"
    static let keycloakOtherRealm = "0b6c3f44-1a2e-4d4e-9a55-1d7a7c0e0002"

    static var keycloak: Framework { Framework(
        name: "keycloak",
        ddl: """
            CREATE TABLE public.user_entity (
                id character varying(36) NOT NULL,
                email character varying(255),
                email_constraint character varying(255),
                email_verified boolean DEFAULT false NOT NULL,
                enabled boolean DEFAULT false NOT NULL,
                federation_link character varying(255),
                first_name character varying(255),
                last_name character varying(255),
                realm_id character varying(255),
                username character varying(255),
                created_timestamp bigint,
                service_account_client_link character varying(255),
                not_before integer DEFAULT 0 NOT NULL
            );
            ALTER TABLE ONLY public.user_entity ADD CONSTRAINT constraint_fb PRIMARY KEY (id);
            ALTER TABLE ONLY public.user_entity ADD CONSTRAINT uk_dykn684sl8up1crfei6eckhd7 UNIQUE (realm_id, email_constraint);
            ALTER TABLE ONLY public.user_entity ADD CONSTRAINT uk_ru8tt6t700s9v50bu18ws5ha6 UNIQUE (realm_id, username);
            CREATE INDEX idx_user_email ON public.user_entity USING btree (email);
            CREATE INDEX idx_user_service_account ON public.user_entity USING btree (realm_id, service_account_client_link);
            CREATE TABLE public.federated_identity (
                identity_provider character varying(255) NOT NULL,
                realm_id character varying(36),
                federated_user_id character varying(255),
                federated_username character varying(255),
                token text,
                user_id character varying(36) NOT NULL
            );
            ALTER TABLE ONLY public.federated_identity ADD CONSTRAINT constraint_40 PRIMARY KEY (identity_provider, user_id);
            ALTER TABLE ONLY public.federated_identity ADD CONSTRAINT fk404288b92ef007a6 FOREIGN KEY (user_id) REFERENCES public.user_entity(id);
            CREATE INDEX idx_fedidentity_feduser ON public.federated_identity USING btree (federated_user_id);
            CREATE INDEX idx_fedidentity_user ON public.federated_identity USING btree (user_id);
            CREATE UNIQUE INDEX ON "public"."federated_identity" ("identity_provider", "realm_id", "federated_user_id");

            """,
        addApple: { i, sub, email in keycloakUser(name: "apple\(i)", realm: keycloakRealm, alias: "apple", sub: sub, email: email) },
        // Even users: Apple rows of the second realm (the old identifiers); odd ones and the rest: Google rows of the first.
        addOther: { i, uid, email in
            i % 2 == 0 && i < 100
                ? keycloakUser(name: "realm2-\(i)", realm: keycloakOtherRealm, alias: "apple", sub: uid, email: email)
                : keycloakUser(name: "google\(i)", realm: keycloakRealm, alias: "google", sub: uid, email: email)
        },
        appleRow: { i in
            """
            SELECT f.federated_user_id || '|' || u.email || '|{}' FROM public.federated_identity f JOIN public.user_entity u ON u.id = f.user_id
            WHERE u.username = 'apple\(i)'
            """
        },
        setEmail: { i, email in "UPDATE public.user_entity SET email = '\(email)', email_constraint = '\(email)' WHERE username = 'apple\(i)'" },
        invariant: """
            SELECT md5(string_agg(x, '|' ORDER BY x)) FROM (
                SELECT f::text AS x FROM public.federated_identity f WHERE f.identity_provider <> 'apple' OR f.realm_id <> '\(keycloakRealm)'
                UNION ALL SELECT (to_jsonb(f) - 'federated_user_id')::text FROM public.federated_identity f
                          WHERE f.identity_provider = 'apple' AND f.realm_id = '\(keycloakRealm)'
                UNION ALL SELECT u::text FROM public.user_entity u WHERE u.username NOT LIKE 'apple%'
                UNION ALL SELECT (to_jsonb(u) - 'email' - 'email_constraint')::text FROM public.user_entity u WHERE u.username LIKE 'apple%'
            ) AS rows
            """
    ) }

    /// A Keycloak user brokered through `alias`, as its first broker login leaves it (duplicate emails forbidden:
    /// `email_constraint` is the email).
    private static func keycloakUser(name: String, realm: String, alias: String, sub: String, email: String) -> String {
        """
        INSERT INTO public.user_entity (id, email, email_constraint, email_verified, enabled, first_name, realm_id, username, created_timestamp)
        VALUES (md5('\(realm)\(name)')::uuid::text, '\(email)', '\(email)', true, true, '\(name)', '\(realm)', '\(name)', 1700000000000);
        INSERT INTO public.federated_identity (identity_provider, realm_id, federated_user_id, federated_username, token, user_id)
        VALUES ('\(alias)', '\(realm)', '\(sub)', '\(email)', NULL, md5('\(realm)\(name)')::uuid::text)
        """
    }
}

@Suite("Keycloak tables with several realms, through the built binary")
struct SchemaKeycloakTests {
    /// Keycloak's `JpaUserProvider.getUserByFederatedIdentity` (the JPQL query `findUserByFederatedIdentityAndRealm`):
    /// realm, identity provider alias and the provider's user ID, then the link's user.
    @Test("Keycloak's own lookup finds each Apple user under the new subject as the same user, in its realm only; the email and email_constraint follow")
    func lookup() async throws {
        func query(_ realm: String) -> @Sendable (String) -> String {
            { "SELECT user_id FROM public.federated_identity WHERE realm_id = '\(realm)' AND identity_provider = 'apple' AND federated_user_id = '\($0)'" }
        }
        try await ServerLookup(apple: query(Framework.keycloakRealm), other: query(Framework.keycloakOtherRealm)) { world in
            for person in world.people {
                let email = try world.claims(try world.token(person.id))["email"]!.stringValue!
                let user = "FROM public.user_entity WHERE id = (\(query(Framework.keycloakRealm)(person.newSub)))"
                #expect(email != person.email)
                // `legacy.email.derived` writes the second column of the users row with the first.
                #expect(try world.psql("SELECT email || ' ' || email_constraint \(user)") == "\(email) \(email)")
            }
            // The other realm's users kept their addresses in both columns.
            #expect(try world.count("SELECT count(*) FROM public.user_entity WHERE realm_id = '\(Framework.keycloakOtherRealm)' AND email <> email_constraint") == 0)
        }.run(.keycloak)
    }
}

extension SchemaKeycloakTests {
    /// Without the index docs/schemas.md gives, `baton doctor` fails on the subject's uniqueness with that statement;
    /// the key needs none: the primary key `(identity_provider, user_id)` already implies it among the rows the
    /// filters select (fewer columns than the key and the filters).
    @Test("doctor asks for the one unique index docs/schemas.md gives; the primary key settles the key")
    func indexes() async throws {
        var framework = Framework.keycloak
        let statements = framework.ddl.split(separator: "\n").filter { $0.contains("CREATE UNIQUE INDEX ON") }
            .map { $0.trimmingCharacters(in: .whitespaces).replacingOccurrences(of: "INDEX ON", with: "INDEX CONCURRENTLY ON").dropLast() }
            .map(String.init)
        #expect(statements.count == 1)
        framework.ddl = framework.ddl.split(separator: "\n").filter { !$0.contains("CREATE UNIQUE INDEX ON") }.joined(separator: "\n") + "\n"
        let docs = try String(contentsOf: packageRoot.appendingPathComponent("docs/schemas.md"), encoding: .utf8)
        for statement in statements { #expect(docs.contains(statement + ";"), "docs/schemas.md gives \(statement)") }
        try await SchemaWorld.run(framework, apple: 1) { world in
            func failures() async throws -> [String] {
                let doctor = try await runBatonOffPool(["doctor", "--config", try world.configuration()])
                return doctor.stdout.split(separator: "\n").filter { $0.hasPrefix("FAIL") }.map(String.init)
            }
            let failed = try await failures()
            #expect(failed.count == 1 && failed[0].hasPrefix("FAIL  subject uniqueness") && failed[0].hasSuffix("; fix: " + statements[0]), "\(failed)")
            _ = try world.psql(statements[0])
            #expect(try await failures().isEmpty)
        }
    }
}
