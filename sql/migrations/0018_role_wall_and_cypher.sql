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

