-- The control plane's tenants, and the function that gives each one its own graph schema.
CREATE TABLE engram.tenants (
    id          uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    key         text NOT NULL UNIQUE CHECK (key ~ '^[A-Za-z0-9][A-Za-z0-9._:@|-]{0,199}$'),
    schema_name text NOT NULL UNIQUE CHECK (schema_name ~ '^t_[0-9a-f]{32}$'),
    created_at  timestamptz NOT NULL DEFAULT now()
);
ALTER TABLE engram.tenants ENABLE ROW LEVEL SECURITY;
ALTER TABLE engram.tenants FORCE ROW LEVEL SECURITY;
-- Each tenant has a role named like its schema, the only role with privileges on that schema.
-- engram_app is a member of every tenant role WITHOUT inheriting its privileges: it reaches a
-- tenant's objects only inside a transaction that switched to that role (the server's tenant
-- context), and a transaction can hold one tenant role at a time. engram_tenant carries what
-- every tenant role shares.
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'engram_tenant') THEN
        CREATE ROLE engram_tenant NOLOGIN NOSUPERUSER NOBYPASSRLS NOCREATEDB NOCREATEROLE;
    END IF;
END
$$;
GRANT USAGE ON SCHEMA ag_catalog TO engram_tenant;
GRANT USAGE ON SCHEMA engram TO engram_tenant;

-- Rows of shared tables are visible only for the tenant pinned in the transaction.
CREATE POLICY tenant_self ON engram.tenants FOR SELECT TO engram_app, engram_tenant
    USING (id = nullif(current_setting('engram.tenant_id', true), '')::uuid);
GRANT SELECT ON engram.tenants TO engram_app, engram_tenant;

-- The objects of one tenant live in one schema, which is also its AGE graph. They are built by
-- "tenant steps": each migration that changes what a tenant has adds a function
-- engram.tenant_step_NNNN(schema) and registers it with engram.add_tenant_step(), which runs it
-- for every existing tenant; a new tenant runs all steps in order.
CREATE TABLE engram.tenant_steps (
    version text PRIMARY KEY,
    fn      regproc NOT NULL
);

CREATE FUNCTION engram.grant_tenant_tables(s text) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog AS $fn$
BEGIN
    EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA %I TO %I', s, s);
    EXECUTE format('GRANT USAGE ON ALL SEQUENCES IN SCHEMA %I TO %I', s, s);
END
$fn$;
REVOKE ALL ON FUNCTION engram.grant_tenant_tables(text) FROM PUBLIC;

CREATE FUNCTION engram.create_tenant_objects(s text) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, ag_catalog AS $fn$
DECLARE
    step record;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = s) THEN
        EXECUTE format('CREATE ROLE %I NOLOGIN NOSUPERUSER NOBYPASSRLS NOCREATEDB NOCREATEROLE IN ROLE engram_tenant', s);
    END IF;
    EXECUTE format('GRANT %I TO engram_app WITH INHERIT FALSE, SET TRUE', s);
    PERFORM ag_catalog.create_graph(s::name);
    FOR step IN SELECT fn FROM engram.tenant_steps ORDER BY version LOOP
        EXECUTE format('SELECT %s(%L)', step.fn, s);
    END LOOP;
    EXECUTE format('GRANT USAGE ON SCHEMA %I TO %I', s, s);
    PERFORM engram.grant_tenant_tables(s);
END
$fn$;
REVOKE ALL ON FUNCTION engram.create_tenant_objects(text) FROM PUBLIC;

CREATE FUNCTION engram.add_tenant_step(v text, step regproc) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, ag_catalog AS $fn$
DECLARE
    t record;
BEGIN
    INSERT INTO engram.tenant_steps (version, fn) VALUES (v, step);
    FOR t IN SELECT schema_name FROM engram.tenants ORDER BY created_at LOOP
        EXECUTE format('SELECT %s(%L)', step, t.schema_name);
        PERFORM engram.grant_tenant_tables(t.schema_name);
    END LOOP;
END
$fn$;
REVOKE ALL ON FUNCTION engram.add_tenant_step(text, regproc) FROM PUBLIC;

-- The graph (vertex label Entity, edge label REL) and the entity tables beside it.
CREATE FUNCTION engram.tenant_step_0002(s text) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, ag_catalog AS $fn$
BEGIN
    PERFORM ag_catalog.create_vlabel(s::name, 'Entity');
    PERFORM ag_catalog.create_elabel(s::name, 'REL');
    -- AGE creates no index that helps: ids for joins, endpoints for traversal, and the
    -- property forms that Cypher's WHERE n.k = $v and {k: $v} patterns compile to.
    EXECUTE format('CREATE UNIQUE INDEX ON %I."Entity" (id)', s);
    EXECUTE format('CREATE UNIQUE INDEX ON %I."Entity" (ag_catalog.agtype_access_operator(VARIADIC ARRAY[properties, %L::ag_catalog.agtype]))', s, '"id"');
    EXECUTE format('CREATE INDEX ON %I."Entity" USING gin (properties)', s);
    EXECUTE format('CREATE UNIQUE INDEX ON %I."REL" (id)', s);
    EXECUTE format('CREATE INDEX ON %I."REL" (start_id, end_id)', s);
    EXECUTE format('CREATE INDEX ON %I."REL" (end_id, start_id)', s);
    -- One relation per (from, type, to).
    EXECUTE format('CREATE UNIQUE INDEX rel_unique ON %I."REL" (start_id, end_id, ag_catalog.agtype_access_operator(VARIADIC ARRAY[properties, %L::ag_catalog.agtype]))', s, '"type"');

    EXECUTE format($ddl$
        CREATE TABLE %1$I.entities (
            id          uuid PRIMARY KEY,
            gid         ag_catalog.graphid NOT NULL UNIQUE,
            name        text NOT NULL,
            name_key    text NOT NULL,
            type        text NOT NULL,
            description text NOT NULL DEFAULT '',
            area        text,
            topic       text,
            subtopic    text,
            certainty   smallint CHECK (certainty BETWEEN 0 AND 100),
            properties  jsonb NOT NULL DEFAULT '{}',
            version     integer NOT NULL DEFAULT 1,
            created_at  timestamptz NOT NULL DEFAULT now(),
            updated_at  timestamptz NOT NULL DEFAULT now(),
            created_by  text NOT NULL,
            updated_by  text NOT NULL,
            deleted_at  timestamptz
        );
        CREATE UNIQUE INDEX ON %1$I.entities (name) WHERE deleted_at IS NULL;
        CREATE INDEX ON %1$I.entities (name_key);
        CREATE TABLE %1$I.observations (
            id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            entity_id   uuid NOT NULL REFERENCES %1$I.entities (id) ON DELETE CASCADE,
            content     text NOT NULL,
            created_at  timestamptz NOT NULL DEFAULT now(),
            created_by  text NOT NULL
        );
        CREATE UNIQUE INDEX ON %1$I.observations (entity_id, md5(content));
    $ddl$, s);

END
$fn$;
SELECT engram.add_tenant_step('0002', 'engram.tenant_step_0002');

-- Resolve a tenant key to its id and schema, creating both on first use when `p_create`
-- (otherwise an unknown key gives NULLs). Runs as the owner so that engram_app never needs
-- CREATE on the database; the schema name is derived here, from a generated uuid, never from
-- the caller.
CREATE FUNCTION engram.tenant_schema(p_key text, p_create boolean, OUT tenant_id uuid, OUT schema_name text)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, engram AS $fn$
BEGIN
    SELECT t.id, t.schema_name INTO tenant_id, schema_name FROM engram.tenants t WHERE t.key = p_key;
    IF FOUND OR NOT p_create THEN
        RETURN;
    END IF;
    PERFORM pg_advisory_xact_lock(hashtext('engram.tenant'), hashtext(p_key));
    SELECT t.id, t.schema_name INTO tenant_id, schema_name FROM engram.tenants t WHERE t.key = p_key;
    IF FOUND THEN
        RETURN;
    END IF;
    tenant_id := gen_random_uuid();
    schema_name := 't_' || replace(tenant_id::text, '-', '');
    INSERT INTO engram.tenants (id, key, schema_name) VALUES (tenant_id, p_key, schema_name);
    PERFORM engram.create_tenant_objects(schema_name);
END
$fn$;
REVOKE ALL ON FUNCTION engram.tenant_schema(text, boolean) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION engram.tenant_schema(text, boolean) TO engram_app;
