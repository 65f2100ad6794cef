import BatonPostgres

/// What the copied tables need beyond what `pg_dump --table` brings, read from the source's catalog.
///
/// `pg_dump --table` dumps a table, its indexes, constraints, triggers and owned sequences, but not the objects
/// its columns, defaults and triggers use: an extension's type (`citext`), an enum, a domain, a composite type, a
/// sequence another table owns, the application's function a trigger or a default calls (Nhost's
/// `auth.set_current_timestamp_updated_at()`, made by `pg_get_functiondef`). ``statements`` create those in the copy, each made by the source itself (`format('%I')`,
/// `format_type`, `pg_get_constraintdef`), in an order that creates a type before what is made of it. A foreign key
/// to a table the rehearsal does not copy cannot hold in the copy: it is in ``foreignKeysLeftOut``.
struct SourceCatalog: Sendable {
    /// A foreign key of a copied table that references a table not copied.
    struct ForeignKey: Sendable, Equatable {
        /// Its TOC entry's catalog identity in a `pg_restore -l` listing: `2606 16529` (`pg_constraint`'s OID, its own).
        var catalogID: String
        /// `users_org_id_fkey of public.users (references public.orgs)`, for the operator.
        var description: String
    }

    /// Statements to run on the copy before the tables are restored: schemas, extensions, types, sequences, functions.
    var statements: [String]
    /// The foreign keys to leave out of the restore.
    var foreignKeysLeftOut: [ForeignKey]

    /// Reads it from the source at `url` in one read-only transaction (safe through a transaction pooler).
    /// `tables` are the configured tables; one the source lacks is skipped (pg_dump reports it).
    /// - Throws: ``PostgresError`` when the source cannot be read.
    static func read(url: String, tables: [PostgresIdentifier]) async throws -> SourceCatalog {
        let pool = PostgresPool(url: url, maxConnections: 1, pooler: .transaction)
        do {
            let catalog = try await pool.withTransaction { connection in
                try await connection.execute("SET TRANSACTION READ ONLY")
                var oids: [String] = []
                for table in tables {
                    let row = try await connection.query("SELECT to_regclass(\(table.quoted)::text)::oid::text")[0]
                    if let oid = try row.decode(String?.self, at: 0) { oids.append(oid) }
                }
                // With an empty search path, format_type and regclass write every name but pg_catalog's with its schema.
                try await connection.execute("SELECT set_config('search_path', '', true)")
                let list = "{" + oids.joined(separator: ",") + "}"
                let statements = try await connection.query(PostgresQuery(unsafeSQL: neededSQL, [list])).map { try $0.decode(String.self, at: 0) }
                let foreignKeys = try await connection.query(PostgresQuery(unsafeSQL: foreignKeysSQL, [list])).map {
                    ForeignKey(catalogID: try $0.decode(String.self, at: 0), description: try $0.decode(String.self, at: 1))
                }
                return SourceCatalog(statements: statements, foreignKeysLeftOut: foreignKeys)
            }
            await pool.close()
            return catalog
        } catch {
            await pool.close()
            throw error
        }
    }

    /// A `pg_restore -l` listing with the entries of ``foreignKeysLeftOut`` commented out (`;`), for `pg_restore -L`, and
    /// the row-level security policies too (`POLICY`, `ROW SECURITY`): a policy may read a table the rehearsal does not
    /// copy (Logto's reads `tenants`), and it would not bind the copy's superuser anyway. Returns the policies left out.
    /// An entry reads `3317; 2606 16529 FK CONSTRAINT public users users_org_id_fkey postgres`.
    func restoreList(_ listing: String) -> (listing: String, policiesLeftOut: [String]) {
        let leftOut = Set(foreignKeysLeftOut.map(\.catalogID))
        var policies: [String] = []
        let lines = listing.split(separator: "\n", omittingEmptySubsequences: false).map { line in
            let words = line.split(separator: " ", maxSplits: 3)
            guard words.count == 4, words[0].hasSuffix(";") else { return String(line) }
            if words[3].hasPrefix("POLICY ") || words[3].hasPrefix("ROW SECURITY ") {
                policies.append(words[3].split(separator: " ").dropLast().joined(separator: " "))
                return ";" + line
            }
            return leftOut.contains("\(words[1]) \(words[2])") ? ";" + line : String(line)
        }
        return (lines.joined(separator: "\n"), policies)
    }

    /// `$1`: the tables' OIDs (`{16518,16535}`). One statement a row, in the order to run them.
    private static let neededSQL = """
        WITH RECURSIVE
        -- The tables and what goes with them (dropped with them): defaults, constraints, indexes, triggers, owned sequences.
        parts(classid, objid) AS (
            SELECT 'pg_catalog.pg_class'::pg_catalog.regclass::pg_catalog.oid, t FROM pg_catalog.unnest($1::pg_catalog.oid[]) AS t
            UNION
            SELECT d.classid, d.objid FROM pg_catalog.pg_depend d JOIN parts p ON d.refclassid = p.classid AND d.refobjid = p.objid
            WHERE d.deptype IN ('a', 'i')
        ),
        -- What the parts use: the columns' types, the functions and sequences of defaults and checks, operator classes.
        refs(classid, objid) AS (
            SELECT d.refclassid, d.refobjid FROM pg_catalog.pg_depend d JOIN parts p USING (classid, objid) WHERE d.deptype = 'n'
            EXCEPT SELECT classid, objid FROM parts
        ),
        -- Those types and what they are made of (a domain's base type, an array's element, a composite type's attributes).
        types(oid, depth) AS (
            SELECT objid, 0 FROM refs WHERE classid = 'pg_catalog.pg_type'::pg_catalog.regclass
            UNION ALL
            SELECT made.oid, t.depth + 1 FROM types t JOIN pg_catalog.pg_type ty ON ty.oid = t.oid
            CROSS JOIN LATERAL (
                SELECT ty.typbasetype WHERE ty.typtype = 'd'
                UNION ALL SELECT ty.typelem WHERE ty.typelem <> 0 AND ty.typlen = -1
                UNION ALL SELECT a.atttypid FROM pg_catalog.pg_attribute a JOIN pg_catalog.pg_class c ON c.oid = a.attrelid
                WHERE c.oid = ty.typrelid AND c.relkind = 'c' AND a.attnum > 0 AND NOT a.attisdropped
            ) AS made(oid)
            WHERE ty.typnamespace <> 'pg_catalog'::pg_catalog.regnamespace
        ),
        -- The types to create, deepest first: the application's enums, domains and composite types (no extension's).
        own(oid, depth) AS (
            SELECT t.oid, max(t.depth) FROM types t JOIN pg_catalog.pg_type ty ON ty.oid = t.oid
            WHERE ty.typnamespace NOT IN ('pg_catalog'::pg_catalog.regnamespace, 'information_schema'::pg_catalog.regnamespace)
              AND (ty.typtype IN ('e', 'd') OR EXISTS (SELECT FROM pg_catalog.pg_class c WHERE c.oid = ty.typrelid AND c.relkind = 'c'))
              AND NOT EXISTS (SELECT FROM pg_catalog.pg_depend m
                              WHERE m.classid = 'pg_catalog.pg_type'::pg_catalog.regclass AND m.objid = t.oid AND m.deptype = 'e')
            GROUP BY t.oid
        ),
        -- Everything used, the types' own defaults and checks included; the extensions are those whose members are among it.
        used(classid, objid) AS (
            SELECT classid, objid FROM refs
            UNION SELECT 'pg_catalog.pg_type'::pg_catalog.regclass, oid FROM types
            UNION SELECT d.refclassid, d.refobjid FROM pg_catalog.pg_depend d JOIN own o
                ON d.classid = 'pg_catalog.pg_type'::pg_catalog.regclass AND d.objid = o.oid WHERE d.deptype = 'n'
            UNION SELECT d.refclassid, d.refobjid FROM pg_catalog.pg_constraint c JOIN own o ON c.contypid = o.oid
                JOIN pg_catalog.pg_depend d ON d.classid = 'pg_catalog.pg_constraint'::pg_catalog.regclass AND d.objid = c.oid WHERE d.deptype = 'n'
        ),
        extensions(oid) AS (
            SELECT m.refobjid FROM used u JOIN pg_catalog.pg_depend m ON m.classid = u.classid AND m.objid = u.objid
            WHERE m.deptype = 'e' AND m.refclassid = 'pg_catalog.pg_extension'::pg_catalog.regclass
        ),
        -- The application's functions the parts call (a trigger's function, a default's), not an extension's.
        functions(oid) AS (
            SELECT r.objid FROM refs r JOIN pg_catalog.pg_proc p ON r.classid = 'pg_catalog.pg_proc'::pg_catalog.regclass AND p.oid = r.objid
            WHERE p.pronamespace <> 'pg_catalog'::pg_catalog.regnamespace
              AND NOT EXISTS (SELECT FROM pg_catalog.pg_depend m
                              WHERE m.classid = 'pg_catalog.pg_proc'::pg_catalog.regclass AND m.objid = p.oid AND m.deptype = 'e')
        ),
        -- Sequences the defaults use that no copied table owns (pg_dump brings the owned ones).
        sequences(oid) AS (
            SELECT c.oid FROM refs r JOIN pg_catalog.pg_class c ON r.classid = 'pg_catalog.pg_class'::pg_catalog.regclass AND c.oid = r.objid
            WHERE c.relkind = 'S'
        )
        SELECT statement FROM (
            SELECT 0 AS step, 0 AS depth, pg_catalog.format('CREATE SCHEMA IF NOT EXISTS %I', n.nspname) AS statement
            FROM pg_catalog.pg_namespace n
            WHERE n.nspname <> 'pg_catalog' AND n.oid IN (
                SELECT relnamespace FROM pg_catalog.pg_class WHERE oid = ANY ($1::pg_catalog.oid[]) OR oid IN (SELECT oid FROM sequences)
                UNION SELECT typnamespace FROM pg_catalog.pg_type WHERE oid IN (SELECT oid FROM own)
                UNION SELECT extnamespace FROM pg_catalog.pg_extension WHERE oid IN (SELECT oid FROM extensions)
                UNION SELECT pronamespace FROM pg_catalog.pg_proc WHERE oid IN (SELECT oid FROM functions))
            UNION ALL
            SELECT 1, 0, pg_catalog.format('CREATE EXTENSION IF NOT EXISTS %I WITH SCHEMA %I CASCADE', e.extname, n.nspname)
            FROM pg_catalog.pg_extension e JOIN pg_catalog.pg_namespace n ON n.oid = e.extnamespace
            WHERE e.oid IN (SELECT oid FROM extensions)
            UNION ALL
            SELECT 2, o.depth, CASE ty.typtype
                WHEN 'e' THEN pg_catalog.format('CREATE TYPE %I.%I AS ENUM (%s)', n.nspname, ty.typname,
                    (SELECT pg_catalog.string_agg(pg_catalog.quote_literal(enumlabel), ', ' ORDER BY enumsortorder)
                     FROM pg_catalog.pg_enum WHERE enumtypid = ty.oid))
                WHEN 'd' THEN pg_catalog.format('CREATE DOMAIN %I.%I AS %s', n.nspname, ty.typname, pg_catalog.format_type(ty.typbasetype, ty.typtypmod))
                    || CASE WHEN ty.typcollation <> base.typcollation THEN ' COLLATE ' || ty.typcollation::pg_catalog.regcollation::text ELSE '' END
                    || coalesce(' DEFAULT ' || coalesce(pg_catalog.pg_get_expr(ty.typdefaultbin, 0), ty.typdefault), '')
                    || CASE WHEN ty.typnotnull THEN ' NOT NULL' ELSE '' END
                    || coalesce((SELECT pg_catalog.string_agg(pg_catalog.format(' CONSTRAINT %I %s', c.conname, pg_catalog.pg_get_constraintdef(c.oid)), ''
                                                              ORDER BY c.conname)
                                 FROM pg_catalog.pg_constraint c WHERE c.contypid = ty.oid AND c.contype = 'c'), '')
                ELSE pg_catalog.format('CREATE TYPE %I.%I AS (%s)', n.nspname, ty.typname,
                    (SELECT pg_catalog.string_agg(pg_catalog.format('%I %s', a.attname, pg_catalog.format_type(a.atttypid, a.atttypmod))
                            || CASE WHEN a.attcollation <> at.typcollation THEN ' COLLATE ' || a.attcollation::pg_catalog.regcollation::text ELSE '' END,
                            ', ' ORDER BY a.attnum)
                     FROM pg_catalog.pg_attribute a JOIN pg_catalog.pg_type at ON at.oid = a.atttypid
                     WHERE a.attrelid = ty.typrelid AND a.attnum > 0 AND NOT a.attisdropped))
                END
            FROM own o JOIN pg_catalog.pg_type ty ON ty.oid = o.oid JOIN pg_catalog.pg_namespace n ON n.oid = ty.typnamespace
            LEFT JOIN pg_catalog.pg_type base ON base.oid = ty.typbasetype
            UNION ALL
            SELECT 3, 0, pg_catalog.format('CREATE SEQUENCE IF NOT EXISTS %I.%I AS %s INCREMENT BY %s MINVALUE %s MAXVALUE %s START WITH %s CACHE %s%s',
                    n.nspname, c.relname, pg_catalog.format_type(s.seqtypid, NULL), s.seqincrement, s.seqmin, s.seqmax, s.seqstart, s.seqcache,
                    CASE WHEN s.seqcycle THEN ' CYCLE' ELSE '' END)
            FROM sequences q JOIN pg_catalog.pg_class c ON c.oid = q.oid JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
            JOIN pg_catalog.pg_sequence s ON s.seqrelid = c.oid
            UNION ALL
            SELECT 4, 0, pg_catalog.pg_get_functiondef(f.oid) FROM functions f
        ) AS needed
        ORDER BY step, depth DESC, statement
        """

    /// `$1`: the tables' OIDs. The foreign keys from them to other tables: catalog identity, description.
    private static let foreignKeysSQL = """
        SELECT pg_catalog.format('%s %s', 'pg_catalog.pg_constraint'::pg_catalog.regclass::pg_catalog.oid, c.oid),
               pg_catalog.format('%s of %s (references %s)', pg_catalog.quote_ident(c.conname), c.conrelid::pg_catalog.regclass, c.confrelid::pg_catalog.regclass)
        FROM pg_catalog.pg_constraint c
        WHERE c.contype = 'f' AND c.conrelid = ANY ($1::pg_catalog.oid[]) AND NOT c.confrelid = ANY ($1::pg_catalog.oid[])
        ORDER BY 1
        """
}
