-- The run-time role's session settings, kept by the database rather than sent by the server at
-- connection start: PgBouncer refuses startup parameters such as search_path (and silently drops
-- others), so a server behind it would otherwise run without them. Set for this database only
-- (several Engram databases may share one cluster and its engram_app role). The server checks them
-- at start and /readyz names any that differ (docs/scaling.md, "Connections").
-- A migration role that may not alter engram_app (neither superuser nor holding ADMIN on it) is
-- warned; the server's check then names the statements an administrator must run.
DO $$
DECLARE
    setting text;
BEGIN
    FOREACH setting IN ARRAY ARRAY[
        -- AGE's operators (@> for {k: v} patterns, =) resolve through the search path.
        'search_path = ag_catalog, public',
        -- Short OLTP queries: starting parallel workers costs more than they save (10-20 ms).
        'max_parallel_workers_per_gather = 0',
        -- Nor does compiling them: JIT starts above a plan cost these queries do not reach.
        'jit = off',
        -- A backend notices soon that its client dropped the connection (a missed deadline).
        'client_connection_check_interval = 1000',
        -- Bounds for work outside a tenant transaction; a tenant transaction sets its own.
        'statement_timeout = 10000',
        'idle_in_transaction_session_timeout = 20000',
        'application_name = engram'
    ] LOOP
        BEGIN
            EXECUTE format('ALTER ROLE engram_app IN DATABASE %I SET %s', current_database(), setting);
        EXCEPTION WHEN insufficient_privilege THEN
            RAISE WARNING 'could not set % for engram_app: an administrator must run ALTER ROLE engram_app IN DATABASE % SET %',
                setting, current_database(), setting;
        END;
    END LOOP;
END
$$;
