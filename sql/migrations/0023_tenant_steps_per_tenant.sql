-- Tenant steps applied one tenant per transaction. Until now a migration that registered a step
-- ran it for every tenant inside the migration's own transaction, whose locks grow with objects x
-- tenants: at PostgreSQL's default max_locks_per_transaction that runs out of shared memory in the
-- low thousands of tenants. From here on a migration only registers its step; `engram migrate`
-- then brings each tenant up to date in a transaction of its own (resumable: each tenant records
-- the last step it has), and a new tenant runs every step when it is made.
-- A migration that registers a step must not itself touch tenants' objects: that is the step's work.

ALTER TABLE engram.tenants ADD COLUMN steps_version text NOT NULL DEFAULT '';
-- Every step registered so far ran for every tenant when it was registered.
UPDATE engram.tenants SET steps_version = (SELECT coalesce(max(version), '') FROM engram.tenant_steps);

CREATE OR REPLACE FUNCTION engram.add_tenant_step(v text, step regproc) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, ag_catalog AS $fn$
BEGIN
    INSERT INTO engram.tenant_steps (version, fn) VALUES (v, step);
END
$fn$;

-- The steps one tenant still lacks, in order, in the caller's transaction; the tenant's row is
-- locked meanwhile, so two runners (or a runner and `engram tenant delete`) never overlap on it.
-- Returns the last step the tenant has, or NULL when there is no such tenant (deleted meanwhile).
CREATE FUNCTION engram.apply_tenant_steps(p_schema text) RETURNS text
LANGUAGE plpgsql SET search_path = pg_catalog, ag_catalog AS $fn$
DECLARE
    done text;
    step record;
BEGIN
    SELECT t.steps_version INTO done FROM engram.tenants t WHERE t.schema_name = p_schema FOR UPDATE;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    FOR step IN SELECT s.version, s.fn FROM engram.tenant_steps s WHERE s.version > done ORDER BY s.version LOOP
        EXECUTE format('SELECT %s(%L)', step.fn, p_schema);
        done := step.version;
    END LOOP;
    PERFORM engram.grant_tenant_tables(p_schema);
    UPDATE engram.tenants SET steps_version = done WHERE schema_name = p_schema;
    RETURN done;
END
$fn$;
REVOKE ALL ON FUNCTION engram.apply_tenant_steps(text) FROM PUBLIC;

-- A new tenant: its role and graph, then every step through the same function (which records the
-- last one it ran, not the newest registered: a step registered meanwhile is left to the runner).
CREATE OR REPLACE FUNCTION engram.create_tenant_objects(s text) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, ag_catalog AS $fn$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = s) THEN
        EXECUTE format('CREATE ROLE %I NOLOGIN NOSUPERUSER NOBYPASSRLS NOCREATEDB NOCREATEROLE IN ROLE engram_tenant', s);
    END IF;
    EXECUTE format('GRANT %I TO engram_app WITH INHERIT FALSE, SET TRUE', s);
    PERFORM ag_catalog.create_graph(s::name);
    PERFORM engram.apply_tenant_steps(s);
    EXECUTE format('GRANT USAGE ON SCHEMA %I TO %I', s, s);
END
$fn$;

-- Resolving a tenant also says whether it has every step: the server refuses (retryably) a tenant
-- whose steps `engram migrate` is still applying, rather than run code that needs them.
DROP FUNCTION engram.tenant_schema(text, boolean);
CREATE FUNCTION engram.tenant_schema(
    p_key text, p_create boolean, OUT tenant_id uuid, OUT schema_name text, OUT steps_current boolean
)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, engram AS $fn$
DECLARE
    done text;
BEGIN
    SELECT t.id, t.schema_name, t.steps_version INTO tenant_id, schema_name, done FROM engram.tenants t WHERE t.key = p_key;
    IF NOT FOUND AND p_create THEN
        PERFORM pg_advisory_xact_lock(hashtext('engram.tenant'), hashtext(p_key));
        SELECT t.id, t.schema_name, t.steps_version INTO tenant_id, schema_name, done FROM engram.tenants t WHERE t.key = p_key;
        IF NOT FOUND THEN
            tenant_id := gen_random_uuid();
            schema_name := 't_' || replace(tenant_id::text, '-', '');
            INSERT INTO engram.tenants (id, key, schema_name) VALUES (tenant_id, p_key, schema_name);
            PERFORM engram.create_tenant_objects(schema_name);
            SELECT t.steps_version INTO done FROM engram.tenants t WHERE t.id = tenant_id;
        END IF;
    END IF;
    steps_current := done IS NOT NULL AND done >= (SELECT coalesce(max(s.version), '') FROM engram.tenant_steps s);
END
$fn$;
REVOKE ALL ON FUNCTION engram.tenant_schema(text, boolean) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION engram.tenant_schema(text, boolean) TO engram_app;
