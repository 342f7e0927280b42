-- Imports that resume: per tenant, one row per imported file (by the SHA-256 of its bytes, its
-- format and the on-existing rule), moved forward by each batch in that batch's own transaction.
-- An interrupted import run again with the same file starts after the last batch that committed.
-- docs/import-export.md.
CREATE FUNCTION engram.tenant_step_0011(s text) RETURNS void
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
REVOKE ALL ON FUNCTION engram.tenant_step_0011(text) FROM PUBLIC;
SELECT engram.add_tenant_step('0011', 'engram.tenant_step_0011');
