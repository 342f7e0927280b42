-- The role switch closed for tenant roles. Every tenant transaction opens with
-- set_config('engram.tenant_id', …) and set_config('role', <tenant role>, …) as engram_app; after
-- that the current role is the tenant's, and SQL running there (a function a Cypher query names,
-- a nested query of query_to_xml or ts_stat, the pg_settings update rule) could call set_config
-- again to become any other tenant and claim its id, since PostgreSQL checks the role against the
-- session user (engram_app, a member of every tenant role). set_config is the one function that
-- changes a setting; only the run-time role keeps it. Settings the server needs inside a tenant
-- transaction are set with SET LOCAL statements, which the server alone writes (Tx.set_local).
-- docs/auth.md ("Switching tenants").
REVOKE EXECUTE ON FUNCTION pg_catalog.set_config(text, text, boolean) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION pg_catalog.set_config(text, text, boolean) TO engram_app;

DO $$
BEGIN
    IF has_function_privilege('engram_tenant', 'pg_catalog.set_config(text, text, boolean)', 'EXECUTE') THEN
        RAISE EXCEPTION 'tenant roles can still execute set_config; run migrations as a superuser';
    END IF;
END
$$;

-- Soft-deleted entities marked on their vertex, so that Cypher (query_graph) can leave them out:
-- their vertex keeps its place (restore brings it back with its edges), and gains `deleted: true`
-- while the entity is deleted. Kept by triggers on `entities`, whatever writes it (removal, merge,
-- restore, import); a row trigger whose WHEN clause is false for every other write costs nothing.
CREATE FUNCTION engram.entity_vertex_follows() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, ag_catalog AS $fn$
BEGIN
    EXECUTE format(
        'UPDATE %I."Entity" SET properties = CASE WHEN $4 THEN'
        ' ag_catalog.agtype_build_map(''id'', $1, ''name'', $2, ''type'', $3, ''deleted'', true)'
        ' ELSE ag_catalog.agtype_build_map(''id'', $1, ''name'', $2, ''type'', $3) END WHERE id = $5',
        TG_TABLE_SCHEMA)
    USING NEW.id::text, NEW.name, NEW.type, NEW.deleted_at IS NOT NULL, NEW.gid;
    RETURN NULL;
END
$fn$;

CREATE FUNCTION engram.tenant_step_0018(s text) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, ag_catalog AS $fn$
BEGIN
    EXECUTE format($ddl$
        CREATE TRIGGER vertex_deleted_on_insert AFTER INSERT ON %1$I.entities
            FOR EACH ROW WHEN (NEW.deleted_at IS NOT NULL) EXECUTE FUNCTION engram.entity_vertex_follows();
        CREATE TRIGGER vertex_deleted_on_update AFTER UPDATE OF deleted_at, name, type ON %1$I.entities
            FOR EACH ROW WHEN (OLD.deleted_at IS DISTINCT FROM NEW.deleted_at
                OR (NEW.deleted_at IS NOT NULL AND (OLD.name, OLD.type) IS DISTINCT FROM (NEW.name, NEW.type)))
            EXECUTE FUNCTION engram.entity_vertex_follows();
        UPDATE %1$I."Entity" v
        SET properties = ag_catalog.agtype_build_map('id', e.id::text, 'name', e.name, 'type', e.type, 'deleted', true)
        FROM %1$I.entities e WHERE e.gid = v.id AND e.deleted_at IS NOT NULL;
    $ddl$, s);
END
$fn$;
REVOKE ALL ON FUNCTION engram.tenant_step_0018(text) FROM PUBLIC;
SELECT engram.add_tenant_step('0018', 'engram.tenant_step_0018');
