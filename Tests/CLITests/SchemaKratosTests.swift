import Foundation
import TestSupport
import Testing

/// Ory Kratos: `identity_credential_identifiers (id, identifier, identity_credential_id, nid, identity_credential_type_id,
/// identity_id)` unique on `(nid, identity_credential_type_id, identifier)`, an OIDC identifier being `<provider>:<sub>`;
/// the subject again in the credential's `identity_credentials.config` (jsonb: `{"providers": [{"subject", "provider",
/// "initial_id_token", …}]}`, one element per linked provider); the email in `identities.traits` and in the verifiable and
/// recovery address tables. As ory/kratos' persistence/sql/migrations/sql leave them at commit b86338d (2026-07-29), dumped
/// from a database those migrations built (postgres files where present, else the dialect-free ones): the tables of
/// 20150100000001000000_networks and 20191100000001000000_identities (to …000004), the `nid` columns of
/// 20210410175418000000_network and its sequels, the unique index of 20210817181232000005_unique_credentials,
/// 20230322144139000001_missing_login_index, 20241023142500000001_drop_unused_indices_identity_credentials,
/// 20241108105000000001_index_cleanup, 20250708190000000001_identities_external_id_index,
/// 20251104000000000000_identifiers_devices_identity_id and 20251105000000000004_identity_id_not_null_fks (`identity_id`
/// on the identifier rows), the address tables of 20191100000008000000_selfservice_verification and
/// 20200519101057000000_create_recovery_addresses (with 20260327101213000000's `break_glass_for_organization`). The credential types' ids are random per install; these are one
/// install's. A second network holds Apple identities with the Apple users' old identifiers; Google identities of the first
/// hold their new ones, and every other Apple identity (of the first fifty) has a Google login linked in the same credential whose subject is
/// its own old Apple `sub`.
extension Framework {
    static let kratosNetwork = "6a2b0c1e-5d4f-4e3a-9b8c-7d6e5f4a0001"
    static let kratosOtherNetwork = "6a2b0c1e-5d4f-4e3a-9b8c-7d6e5f4a0002"
    static let kratosOIDC = "6fa5e2e0-bfce-4631-b62b-cf2b0252b289"

    static var kratos: Framework { Framework(
        name: "kratos",
        ddl: """
            CREATE TABLE public.networks (id uuid NOT NULL, created_at timestamp without time zone NOT NULL,
                updated_at timestamp without time zone NOT NULL);
            ALTER TABLE ONLY public.networks ADD CONSTRAINT networks_pkey PRIMARY KEY (id);
            CREATE TABLE public.identities (
                id uuid NOT NULL,
                schema_id character varying(2048) NOT NULL,
                traits jsonb NOT NULL,
                created_at timestamp without time zone NOT NULL,
                updated_at timestamp without time zone NOT NULL,
                nid uuid,
                state character varying(255) DEFAULT 'active'::character varying NOT NULL,
                state_changed_at timestamp without time zone,
                metadata_public jsonb,
                metadata_admin jsonb,
                available_aal character varying(4),
                organization_id uuid,
                external_id character varying(64),
                CONSTRAINT identities_external_id_check CHECK (((external_id IS NULL) OR ((external_id)::text <> ''::text)))
            );
            ALTER TABLE ONLY public.identities ADD CONSTRAINT identities_pkey PRIMARY KEY (id);
            CREATE UNIQUE INDEX identities_nid_external_id_idx ON public.identities USING btree (nid, external_id) WHERE (external_id IS NOT NULL);
            CREATE INDEX identities_nid_id_idx ON public.identities USING btree (nid, id);
            CREATE INDEX identities_nid_organization_id_idx ON public.identities USING btree (organization_id);
            ALTER TABLE ONLY public.identities ADD CONSTRAINT identities_nid_fk_idx FOREIGN KEY (nid) REFERENCES public.networks(id) ON UPDATE RESTRICT ON DELETE CASCADE;
            CREATE TABLE public.identity_credential_types (id uuid NOT NULL, name character varying(32) NOT NULL);
            ALTER TABLE ONLY public.identity_credential_types ADD CONSTRAINT identity_credential_types_pkey PRIMARY KEY (id);
            CREATE UNIQUE INDEX identity_credential_types_name_idx ON public.identity_credential_types USING btree (name);
            CREATE TABLE public.identity_credentials (
                id uuid NOT NULL,
                config jsonb NOT NULL,
                identity_credential_type_id uuid NOT NULL,
                identity_id uuid NOT NULL,
                created_at timestamp without time zone NOT NULL,
                updated_at timestamp without time zone NOT NULL,
                nid uuid,
                version integer DEFAULT 0 NOT NULL
            );
            ALTER TABLE ONLY public.identity_credentials ADD CONSTRAINT identity_credentials_pkey PRIMARY KEY (id);
            CREATE INDEX identity_credentials_identity_id_idx ON public.identity_credentials USING btree (identity_id);
            ALTER TABLE ONLY public.identity_credentials ADD CONSTRAINT identity_credentials_identity_credential_type_id_fkey FOREIGN KEY (identity_credential_type_id) REFERENCES public.identity_credential_types(id) ON DELETE CASCADE;
            ALTER TABLE ONLY public.identity_credentials ADD CONSTRAINT identity_credentials_identity_id_fkey FOREIGN KEY (identity_id) REFERENCES public.identities(id) ON DELETE CASCADE;
            ALTER TABLE ONLY public.identity_credentials ADD CONSTRAINT identity_credentials_nid_fk_idx FOREIGN KEY (nid) REFERENCES public.networks(id) ON UPDATE RESTRICT ON DELETE CASCADE;
            CREATE TABLE public.identity_credential_identifiers (
                id uuid NOT NULL,
                identifier character varying(255) NOT NULL,
                identity_credential_id uuid NOT NULL,
                created_at timestamp without time zone NOT NULL,
                updated_at timestamp without time zone NOT NULL,
                nid uuid,
                identity_credential_type_id uuid NOT NULL,
                identity_id uuid NOT NULL
            );
            ALTER TABLE ONLY public.identity_credential_identifiers ADD CONSTRAINT identity_credential_identifiers_pkey PRIMARY KEY (id);
            CREATE INDEX identity_credential_identifiers_ici_nid_i_idx ON public.identity_credential_identifiers USING btree (identity_credential_id, nid, identifier);
            CREATE UNIQUE INDEX identity_credential_identifiers_identifier_nid_type_uq_idx ON public.identity_credential_identifiers USING btree (nid, identity_credential_type_id, identifier);
            CREATE INDEX identity_credential_identifiers_identities_id_fk_idx ON public.identity_credential_identifiers USING btree (identity_id);
            CREATE INDEX identity_credential_identifiers_nid_i_ici_idx ON public.identity_credential_identifiers USING btree (nid, identifier, identity_credential_id);
            ALTER TABLE ONLY public.identity_credential_identifiers ADD CONSTRAINT identity_credential_identifiers_identities_id_fk FOREIGN KEY (identity_id) REFERENCES public.identities(id) ON UPDATE RESTRICT ON DELETE CASCADE;
            ALTER TABLE ONLY public.identity_credential_identifiers ADD CONSTRAINT identity_credential_identifiers_identity_credential_id_fkey FOREIGN KEY (identity_credential_id) REFERENCES public.identity_credentials(id) ON DELETE CASCADE;
            ALTER TABLE ONLY public.identity_credential_identifiers ADD CONSTRAINT identity_credential_identifiers_nid_fk_idx FOREIGN KEY (nid) REFERENCES public.networks(id) ON UPDATE RESTRICT ON DELETE CASCADE;
            ALTER TABLE ONLY public.identity_credential_identifiers ADD CONSTRAINT identity_credential_identifiers_type_id_fk_idx FOREIGN KEY (identity_credential_type_id) REFERENCES public.identity_credential_types(id) ON UPDATE RESTRICT ON DELETE CASCADE;
            CREATE TABLE public.identity_verifiable_addresses (
                id uuid NOT NULL,
                status character varying(16) NOT NULL,
                via character varying(16) NOT NULL,
                verified boolean NOT NULL,
                value character varying(400) NOT NULL,
                verified_at timestamp without time zone,
                identity_id uuid NOT NULL,
                created_at timestamp without time zone NOT NULL,
                updated_at timestamp without time zone NOT NULL,
                nid uuid
            );
            ALTER TABLE ONLY public.identity_verifiable_addresses ADD CONSTRAINT identity_verifiable_addresses_pkey PRIMARY KEY (id);
            CREATE INDEX identity_verifiable_addresses_identity_id_idx ON public.identity_verifiable_addresses USING btree (identity_id);
            CREATE UNIQUE INDEX identity_verifiable_addresses_status_via_uq_idx ON public.identity_verifiable_addresses USING btree (nid, via, value);
            ALTER TABLE ONLY public.identity_verifiable_addresses ADD CONSTRAINT identity_verifiable_addresses_identity_id_fkey FOREIGN KEY (identity_id) REFERENCES public.identities(id) ON DELETE CASCADE;
            ALTER TABLE ONLY public.identity_verifiable_addresses ADD CONSTRAINT identity_verifiable_addresses_nid_fk_idx FOREIGN KEY (nid) REFERENCES public.networks(id) ON UPDATE RESTRICT ON DELETE CASCADE;
            CREATE TABLE public.identity_recovery_addresses (
                id uuid NOT NULL,
                via character varying(16) NOT NULL,
                value character varying(400) NOT NULL,
                identity_id uuid NOT NULL,
                created_at timestamp without time zone NOT NULL,
                updated_at timestamp without time zone NOT NULL,
                nid uuid,
                break_glass_for_organization uuid
            );
            ALTER TABLE ONLY public.identity_recovery_addresses ADD CONSTRAINT identity_recovery_addresses_pkey PRIMARY KEY (id);
            CREATE INDEX identity_recovery_addresses_identity_id_idx ON public.identity_recovery_addresses USING btree (identity_id);
            CREATE UNIQUE INDEX identity_recovery_addresses_status_via_uq_idx ON public.identity_recovery_addresses USING btree (nid, via, value);
            ALTER TABLE ONLY public.identity_recovery_addresses ADD CONSTRAINT identity_recovery_addresses_identity_id_fkey FOREIGN KEY (identity_id) REFERENCES public.identities(id) ON DELETE CASCADE;
            ALTER TABLE ONLY public.identity_recovery_addresses ADD CONSTRAINT identity_recovery_addresses_nid_fk_idx FOREIGN KEY (nid) REFERENCES public.networks(id) ON UPDATE RESTRICT ON DELETE CASCADE;
            INSERT INTO public.networks VALUES ('\(kratosNetwork)', '2025-01-01 00:00:00', '2025-01-01 00:00:00'),
                                               ('\(kratosOtherNetwork)', '2025-02-01 00:00:00', '2025-02-01 00:00:00');
            INSERT INTO public.identity_credential_types VALUES ('14f3b7e2-8725-4068-be39-8a796485fd97', 'code'),
                ('26433aa2-c33a-4870-85dc-230af354e0bf', 'deviceauthn'), ('567a0730-7f48-4dd7-a13d-df87a51c245f', 'lookup_secret'),
                ('\(kratosOIDC)', 'oidc'), ('8d0ca544-9bf6-45d3-bd75-0bbb3aeba3c7', 'passkey'),
                ('78c1b41d-8341-4507-aa60-aff1d4369670', 'password'), ('7bddcf6c-f50e-4a18-9b0f-429114c33419', 'saml'),
                ('5e29b036-aa47-457f-9fe6-aa8b854a752b', 'totp'), ('6b213fa0-e6ad-46cb-8878-b088d2ce2e3c', 'webauthn');

            """,
        addApple: { i, sub, email in
            kratosIdentity(name: "apple\(i)", network: kratosNetwork, email: email,
                           logins: i % 2 == 0 && i < 50 ? [("google", sub), ("apple", sub)] : [("apple", sub)])
        },
        // Even users: Apple identities of the second network (the old identifiers); odd ones and the rest: Google identities of the first.
        addOther: { i, uid, email in
            i % 2 == 0 && i < 100
                ? kratosIdentity(name: "network2-\(i)", network: kratosOtherNetwork, email: email, logins: [("apple", uid)])
                : kratosIdentity(name: "google\(i)", network: kratosNetwork, email: email, logins: [("google", uid)])
        },
        appleRow: { i in
            """
            SELECT substr(ici.identifier, 7) || '|' || (i.traits->>'email') || '|'
                   || jsonb_build_object('sub', (SELECT p->>'subject' FROM jsonb_array_elements(c.config->'providers') p WHERE p->>'provider' = 'apple'))::text
            FROM public.identity_credential_identifiers ici JOIN public.identity_credentials c ON c.id = ici.identity_credential_id
            JOIN public.identities i ON i.id = ici.identity_id
            WHERE i.traits->'name'->>'first' = 'apple\(i)' AND ici.identifier LIKE 'apple:%'
            """
        },
        setEmail: { i, email in "UPDATE public.identities SET traits = jsonb_set(traits, '{email}', to_jsonb('\(email)'::text)) WHERE traits->'name'->>'first' = 'apple\(i)'" },
        invariant: """
            SELECT md5(string_agg(x, '|' ORDER BY x)) FROM (
                SELECT ici::text AS x FROM public.identity_credential_identifiers ici WHERE NOT (\(kratosAppleRow))
                UNION ALL SELECT (to_jsonb(ici) - 'identifier')::text FROM public.identity_credential_identifiers ici WHERE \(kratosAppleRow)
                UNION ALL SELECT c::text FROM public.identity_credentials c
                          WHERE c.id NOT IN (SELECT identity_credential_id FROM public.identity_credential_identifiers ici WHERE \(kratosAppleRow))
                UNION ALL SELECT (to_jsonb(c) - 'config')::text || (c.config - 'providers')::text
                                 || (SELECT jsonb_agg(CASE WHEN p->>'provider' = 'apple' THEN p - 'subject' ELSE p END ORDER BY n)
                                     FROM jsonb_array_elements(c.config->'providers') WITH ORDINALITY AS e(p, n))::text
                          FROM public.identity_credentials c
                          WHERE c.id IN (SELECT identity_credential_id FROM public.identity_credential_identifiers ici WHERE \(kratosAppleRow))
                UNION ALL SELECT i::text FROM public.identities i
                UNION ALL SELECT a::text FROM public.identity_verifiable_addresses a
                UNION ALL SELECT r::text FROM public.identity_recovery_addresses r
                UNION ALL SELECT n::text FROM public.networks n
                UNION ALL SELECT t::text FROM public.identity_credential_types t
            ) AS rows
            """,
        jsonSubjectKeys: ["sub"]
    ) }

    /// The identifier rows Baton may rewrite: the first network's OIDC rows of Apple logins (or released by `baton merge`).
    private static let kratosAppleRow = """
        ici.nid = '\(kratosNetwork)' AND ici.identity_credential_type_id = '\(kratosOIDC)'
        AND (ici.identifier LIKE 'apple:%' OR ici.identifier LIKE 'baton-released:%')
        """

    /// A Kratos identity as its OIDC registration leaves it (identity schema with `email` and `name.first` traits, the
    /// email a verified and a recovery address): one OIDC credential whose config lists `logins` (provider, subject) in
    /// order, with one `<provider>:<subject>` identifier row each.
    private static func kratosIdentity(name: String, network: String, email: String, logins: [(String, String)]) -> String {
        let identity = "md5('\(network)\(name)')::uuid", credential = "md5('\(network)\(name)/oidc')::uuid"
        let providers = logins.map { provider, subject in
            """
            {"subject": "\(subject)", "provider": "\(provider)", "initial_id_token": "enc:\(provider)-id-token-\(name)",
             "initial_access_token": "enc:\(provider)-access-\(name)", "initial_refresh_token": ""}
            """
        }.joined(separator: ", ")
        var sql = """
            INSERT INTO public.identities (id, schema_id, traits, created_at, updated_at, nid, state, metadata_public, available_aal)
            VALUES (\(identity), 'default', '{"email": "\(email)", "name": {"first": "\(name)", "last": "Doe"}}',
                    '2025-01-01 00:00:00', '2025-01-02 00:00:00', '\(network)', 'active', '{"plan": "free"}', 'aal1');
            INSERT INTO public.identity_verifiable_addresses (id, status, via, verified, value, verified_at, identity_id, created_at, updated_at, nid)
            VALUES (md5('\(network)\(name)/va')::uuid, 'completed', 'email', true, '\(email)', '2025-01-01 00:00:00', \(identity),
                    '2025-01-01 00:00:00', '2025-01-01 00:00:00', '\(network)');
            INSERT INTO public.identity_recovery_addresses (id, via, value, identity_id, created_at, updated_at, nid)
            VALUES (md5('\(network)\(name)/ra')::uuid, 'email', '\(email)', \(identity), '2025-01-01 00:00:00', '2025-01-01 00:00:00', '\(network)');
            INSERT INTO public.identity_credentials (id, config, identity_credential_type_id, identity_id, created_at, updated_at, nid, version)
            VALUES (\(credential), '{"providers": [\(providers)]}', '\(kratosOIDC)', \(identity), '2025-01-01 00:00:00', '2025-01-01 00:00:00', '\(network)', 0)
            """
        for (provider, subject) in logins {
            sql += """
                ;
                INSERT INTO public.identity_credential_identifiers (id, identifier, identity_credential_id, created_at, updated_at, nid,
                    identity_credential_type_id, identity_id)
                VALUES (md5('\(network)\(name)/\(provider)')::uuid, '\(provider):\(subject)', \(credential), '2025-01-01 00:00:00',
                        '2025-01-01 00:00:00', '\(network)', '\(kratosOIDC)', \(identity))
                """
        }
        return sql
    }

    /// Kratos' OIDC login, as SQL: `FindByCredentialsIdentifier` (persistence/sql/identity/persister_identity.go: the
    /// identifier `<provider>:<sub>` of the `oidc` type in the network, joined to its credential), then `processLogin`
    /// (selfservice/strategy/oidc/strategy_login.go), which signs in only when the credential's config lists the provider
    /// with that subject (otherwise "Unable to find matching OpenID Connect credentials"). The identity's id, or empty.
    static func kratosLogin(network: String, provider: String = "apple") -> @Sendable (String) -> String {
        { sub in
            """
            SELECT ic.identity_id FROM public.identity_credentials ic
            INNER JOIN public.identity_credential_identifiers ici ON ic.id = ici.identity_credential_id
                AND ici.identity_credential_type_id = (SELECT id FROM public.identity_credential_types WHERE name = 'oidc')
            WHERE ici.identifier IN ('\(provider):\(sub)', '\(provider):\(sub)') AND ic.nid = '\(network)' AND ici.nid = '\(network)'
              AND EXISTS (SELECT 1 FROM jsonb_array_elements(ic.config->'providers') p WHERE p->>'subject' = '\(sub)' AND p->>'provider' = '\(provider)')
            LIMIT 1
            """
        }
    }
}

@Suite("Ory Kratos tables with several networks, through the built binary")
struct SchemaKratosTests {
    @Test("Kratos' own login finds each Apple user under the new subject as the same identity, in its network only; the config's copy follows, emails stay")
    func lookup() async throws {
        try await ServerLookup(apple: Framework.kratosLogin(network: Framework.kratosNetwork),
                               other: Framework.kratosLogin(network: Framework.kratosOtherNetwork)) { world in
            for (i, person) in world.people.enumerated() {
                let identity = "SELECT identity_id FROM public.identity_credential_identifiers WHERE identifier = 'apple:\(person.newSub)'"
                // The config's Apple element holds the new sub; a linked Google login holding the old string kept it.
                let providers = try world.psql("""
                    SELECT string_agg((p->>'provider') || '=' || (p->>'subject'), ',' ORDER BY n) FROM public.identity_credentials c,
                    jsonb_array_elements(c.config->'providers') WITH ORDINALITY AS e(p, n) WHERE c.identity_id = (\(identity))
                    """)
                #expect(providers == (i % 2 == 0 ? "google=\(person.oldSub),apple=\(person.newSub)" : "apple=\(person.newSub)"), "\(providers)")
                #expect(try world.psql(Framework.kratosLogin(network: Framework.kratosNetwork, provider: "google")(person.oldSub)) == (i % 2 == 0 ? world.psql(identity) : ""))
                // Baton writes no email of Kratos': the traits and both address tables keep the old team's relay address.
                #expect(try world.psql("""
                    SELECT (SELECT traits->>'email' FROM public.identities WHERE id = (\(identity))) || ' ' ||
                           (SELECT value FROM public.identity_verifiable_addresses WHERE identity_id = (\(identity))) || ' ' ||
                           (SELECT value FROM public.identity_recovery_addresses WHERE identity_id = (\(identity)))
                    """) == "\(person.email) \(person.email) \(person.email)")
            }
        }.run(.kratos)
    }

    @Test("doctor passes on Kratos' own indexes; exchange records the duplicate, report lists it, merge moves apple:<new sub> and its config copy")
    func merge() async throws {
        try await ServerLookup(apple: Framework.kratosLogin(network: Framework.kratosNetwork),
                               other: Framework.kratosLogin(network: Framework.kratosOtherNetwork)).runMerge(.kratos)
    }

    @Test("the exchange then baton rollback: Kratos' login finds each Apple user under the old sub again; every table back byte for byte, the config's copy too")
    func rollback() async throws {
        try await ServerLookup(apple: Framework.kratosLogin(network: Framework.kratosNetwork),
                               other: Framework.kratosLogin(network: Framework.kratosOtherNetwork)).runRollback(.kratos)
    }
}
