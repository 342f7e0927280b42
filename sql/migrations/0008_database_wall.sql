-- The database wall: what a tenant transaction (current role = a tenant role, session user =
-- engram_app) must not be able to do even if it ran SQL of its own. PostgreSQL and AGE grant
-- EXECUTE on functions to PUBLIC by default, and TEMP on the database; this takes back what the
-- server never uses at run time. The owner (who runs migrations and owns the SECURITY DEFINER
-- functions that create and delete tenants) keeps what those need. At the end: cursor signing keys
-- that rotate. docs/security.md.

-- AGE's graph DDL and bulk loaders. The loaders read files on the database server and write into
-- any graph's label tables without privilege checks; the DDL functions create, alter and drop
-- graphs and labels. Tenant graphs are made only by engram.tenant_schema() and dropped only by
-- `engram tenant delete`, both as the owner. Listed by name so that every overload goes.
DO $$
DECLARE
    f regprocedure;
BEGIN
    FOR f IN
        SELECT p.oid::regprocedure FROM pg_proc p
        WHERE p.pronamespace = 'ag_catalog'::regnamespace
          AND p.proname IN ('create_graph', 'drop_graph', 'alter_graph', 'create_vlabel', 'create_elabel',
                            'drop_label', 'load_labels_from_file', 'load_edges_from_file',
                            'create_complete_graph', 'age_create_barbell_graph')
    LOOP
        EXECUTE format('REVOKE EXECUTE ON FUNCTION %s FROM PUBLIC', f);
        EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO CURRENT_USER', f);
    END LOOP;
END
$$;

-- Large objects live outside every tenant's schema, are not removed with a tenant, and the
-- server never uses them; a tenant could only use them to store data nobody accounts for.
-- Server-side lo_import/lo_export are superuser-only already. pg_logical_emit_message writes
-- arbitrary data into the write-ahead log.
DO $$
DECLARE
    f regprocedure;
BEGIN
    FOR f IN
        SELECT p.oid::regprocedure FROM pg_proc p
        WHERE p.pronamespace = 'pg_catalog'::regnamespace
          AND p.proname IN ('lo_create', 'lo_creat', 'lo_from_bytea', 'lo_put', 'lo_open', 'lo_close', 'loread',
                            'lowrite', 'lo_get', 'lo_unlink', 'lo_truncate', 'lo_truncate64', 'lo_lseek',
                            'lo_lseek64', 'lo_tell', 'lo_tell64', 'lo_import', 'lo_export',
                            'pg_logical_emit_message')
    LOOP
        EXECUTE format('REVOKE EXECUTE ON FUNCTION %s FROM PUBLIC', f);
    END LOOP;
END
$$;

-- Temporary tables: nothing the server does needs them, and a temporary relation is searched
-- before every schema of the search path.
DO $$
BEGIN
    EXECUTE format('REVOKE TEMPORARY ON DATABASE %I FROM PUBLIC', current_database());
END
$$;

-- Functions of the control plane run only for the roles granted them by name (tenant steps, for
-- one, had EXECUTE for PUBLIC), now and in later migrations.
REVOKE EXECUTE ON ALL FUNCTIONS IN SCHEMA engram FROM PUBLIC;
-- Default privileges given per schema can only add to the global ones, so the global default for
-- functions the migration owner creates from now on is what must lose PUBLIC's EXECUTE.
ALTER DEFAULT PRIVILEGES REVOKE EXECUTE ON FUNCTIONS FROM PUBLIC;

-- A REVOKE by a role that does not own the function only warns. Fail instead of leaving a wall
-- with a hole: migrations must run as the role that created the extensions (a superuser).
DO $$
DECLARE
    open_functions text;
BEGIN
    SELECT string_agg(p.oid::regprocedure::text, ', ') INTO open_functions
    FROM pg_proc p
    WHERE p.pronamespace IN ('ag_catalog'::regnamespace, 'pg_catalog'::regnamespace, 'engram'::regnamespace)
      AND p.proname IN ('create_graph', 'drop_graph', 'alter_graph', 'create_vlabel', 'create_elabel', 'drop_label',
                        'load_labels_from_file', 'load_edges_from_file', 'create_complete_graph',
                        'age_create_barbell_graph', 'lo_create', 'lo_from_bytea', 'lo_put', 'lo_open',
                        'pg_logical_emit_message', 'tenant_step_0002')
      AND has_function_privilege('engram_tenant', p.oid, 'EXECUTE');
    IF open_functions IS NOT NULL THEN
        RAISE EXCEPTION 'tenant roles can still execute %; run migrations as the owner of the extensions', open_functions;
    END IF;
    IF has_database_privilege('engram_tenant', current_database(), 'TEMPORARY') THEN
        RAISE EXCEPTION 'tenant roles can still create temporary tables in %', current_database();
    END IF;
END
$$;

-- Cursor signing keys rotate (`engram cursor-key rotate`): each key records when it was added, so
-- that servers sign with the newest one they all know and verify with every one still kept.
ALTER TABLE engram.server_secrets ADD COLUMN created_at timestamptz NOT NULL DEFAULT now();
