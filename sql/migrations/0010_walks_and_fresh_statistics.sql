-- Walks and paths drop edges whose other end is a soft-deleted entity. Deleted entities are few, so
-- a partial index of their graph ids lets that test be an anti-join against a handful of rows
-- instead of a probe of the whole entities table per edge.
CREATE FUNCTION engram.tenant_step_0010(s text) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, ag_catalog AS $fn$
BEGIN
    EXECUTE format('CREATE INDEX entities_deleted_gid ON %I.entities (gid) WHERE deleted_at IS NOT NULL', s);
END
$fn$;
REVOKE ALL ON FUNCTION engram.tenant_step_0010(text) FROM PUBLIC;
SELECT engram.add_tenant_step('0010', 'engram.tenant_step_0010');

-- Planner statistics for the tables of the tenant pinned to the transaction that have more than
-- doubled in size since they were last analyzed (and hold at least 16 pages): a bulk write calls
-- this at its end, so the reads that follow an import are planned on what the tables now hold
-- instead of waiting up to a minute for autovacuum. Bounded: a table is analyzed again only after
-- it doubled again, and ANALYZE reads a fixed-size sample. Tables another session is analyzing are
-- skipped, not waited for. Returns the tables analyzed. Runs as the owner: tenant roles may not
-- ANALYZE, and get nothing else through this.
CREATE FUNCTION engram.analyze_outgrown_tables() RETURNS text[]
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, engram AS $fn$
DECLARE
    s text;
    t record;
    done text[] := '{}';
BEGIN
    SELECT schema_name INTO STRICT s FROM engram.tenants
    WHERE id = nullif(current_setting('engram.tenant_id', true), '')::uuid;
    FOR t IN
        SELECT c.relname FROM pg_class c
        WHERE c.relnamespace = s::regnamespace AND c.relkind = 'r'
          AND c.relname IN ('entities', 'observations', 'history', 'search_docs', 'Entity', 'REL')
          AND pg_relation_size(c.oid) / current_setting('block_size')::bigint >= 16
          AND pg_relation_size(c.oid) / current_setting('block_size')::bigint > 2 * c.relpages
        ORDER BY c.relname
    LOOP
        EXECUTE format('ANALYZE (SKIP_LOCKED) %I.%I', s, t.relname);
        done := done || t.relname::text;
    END LOOP;
    RETURN done;
END
$fn$;
REVOKE ALL ON FUNCTION engram.analyze_outgrown_tables() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION engram.analyze_outgrown_tables() TO engram_app, engram_tenant;
