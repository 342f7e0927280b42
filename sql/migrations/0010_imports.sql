-- Imports that resume: per tenant, one row per imported file (by the SHA-256 of its bytes, its
-- format and the on-existing rule), moved forward by each batch in that batch's own transaction.
-- An interrupted import run again with the same file starts after the last batch that committed.
-- docs/import-export.md.
CREATE FUNCTION engram.tenant_step_0010(s text) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, ag_catalog AS $fn$
BEGIN
    EXECUTE format($ddl$
        CREATE TABLE %1$I.imports (
            digest      bytea NOT NULL CHECK (octet_length(digest) = 32),
            format      text NOT NULL,
            on_existing text NOT NULL,
            pass        smallint NOT NULL DEFAULT 1,   -- 1: entities, 2: relations and history
            line        bigint NOT NULL DEFAULT 0,     -- the last line of that pass whose batch committed
            counts      jsonb NOT NULL DEFAULT '{}',
            refused     jsonb NOT NULL DEFAULT '[]',   -- the first refused lines, with their reasons
            actor       text NOT NULL,
            started_at  timestamptz NOT NULL DEFAULT now(),
            updated_at  timestamptz NOT NULL DEFAULT now(),
            finished_at timestamptz,
            PRIMARY KEY (digest, format, on_existing)
        );
    $ddl$, s);
END
$fn$;
REVOKE ALL ON FUNCTION engram.tenant_step_0010(text) FROM PUBLIC;
SELECT engram.add_tenant_step('0010', 'engram.tenant_step_0010');

-- A tenant role may refresh the planner statistics of its own tables (PostgreSQL 17's MAINTAIN):
-- an import into a new tenant grows its tables from nothing, and until autovacuum gets to them
-- the planner reads stale statistics (a sequential scan per batch lookup). Imports ANALYZE as they
-- go. MAINTAIN covers only the tenant's own tables: ANALYZE, VACUUM, REINDEX, CLUSTER, LOCK.
CREATE OR REPLACE FUNCTION engram.grant_tenant_tables(s text) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog AS $fn$
BEGIN
    EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE, MAINTAIN ON ALL TABLES IN SCHEMA %I TO %I', s, s);
    EXECUTE format('GRANT USAGE ON ALL SEQUENCES IN SCHEMA %I TO %I', s, s);
END
$fn$;
REVOKE ALL ON FUNCTION engram.grant_tenant_tables(text) FROM PUBLIC;
SELECT engram.grant_tenant_tables(schema_name) FROM engram.tenants;
