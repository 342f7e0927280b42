-- Cells: tenants' schemas spread over several PostgreSQL databases. The control database (the one
-- ENGRAM_DATABASE_URL names) keeps the directory: which cells there are, and where each tenant
-- lives. A cell's connection URLs are configuration, never rows. The control database is itself
-- the cell `main`. Every cell is migrated with these same files; on a cell other than the control
-- database, engram.cells and engram.tenants.cell are not read (the directory is the truth for
-- where a tenant lives, the cell's own engram.tenants row for what it has).

CREATE TABLE engram.cells (
    name       text PRIMARY KEY CHECK (name ~ '^[a-z][a-z0-9]{0,30}$'),
    state      text NOT NULL DEFAULT 'open' CHECK (state IN ('open', 'draining', 'full')),
    capacity   integer CHECK (capacity BETWEEN 0 AND 10000000),
    created_at timestamptz NOT NULL DEFAULT now()
);
INSERT INTO engram.cells (name) VALUES ('main');
-- Names and states only: the run-time role reads them for placement's callers and /readyz.
GRANT SELECT ON engram.cells TO engram_app;

ALTER TABLE engram.tenants ADD COLUMN cell text NOT NULL DEFAULT 'main' REFERENCES engram.cells (name);
CREATE INDEX ON engram.tenants (cell);

-- Where a new tenant goes: the open cell with the fewest tenants whose capacity (if set) is not
-- reached; NULL when none may take one. Ties go to `main`, then by name.
CREATE FUNCTION engram.place_tenant() RETURNS text
LANGUAGE sql STABLE SET search_path = pg_catalog AS $fn$
    SELECT c.name
    FROM engram.cells c
    LEFT JOIN LATERAL (SELECT count(*) AS n FROM engram.tenants t WHERE t.cell = c.name) k ON true
    WHERE c.state = 'open' AND (c.capacity IS NULL OR k.n < c.capacity)
    ORDER BY k.n, c.name <> 'main', c.name
    LIMIT 1
$fn$;
REVOKE ALL ON FUNCTION engram.place_tenant() FROM PUBLIC;

-- Resolve a tenant key in the directory: its id, schema and cell, and (for a tenant of `main`)
-- whether it has every step. With `p_create`, an unknown key is placed (engram.place_tenant) and
-- its directory row written; on `main` its objects are made here too, as engram.tenant_schema
-- does. On another cell `steps_current` is NULL: the server then makes or finds the schema on
-- that cell with engram.cell_tenant (idempotent: a crash between the two leaves the row, and the
-- next call finishes the schema). No open cell with room: `engram.place_tenant` gives NULL and
-- the insert fails (the server says `unavailable`, reason `no_open_cell`).
CREATE FUNCTION engram.tenant_directory(
    p_key text, p_create boolean,
    OUT tenant_id uuid, OUT schema_name text, OUT cell text, OUT steps_current boolean
)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, engram AS $fn$
DECLARE
    done text;
BEGIN
    SELECT t.id, t.schema_name, t.cell, t.steps_version INTO tenant_id, schema_name, cell, done
    FROM engram.tenants t WHERE t.key = p_key;
    IF NOT FOUND AND p_create THEN
        PERFORM pg_advisory_xact_lock(hashtext('engram.tenant'), hashtext(p_key));
        SELECT t.id, t.schema_name, t.cell, t.steps_version INTO tenant_id, schema_name, cell, done
        FROM engram.tenants t WHERE t.key = p_key;
        IF NOT FOUND THEN
            -- One placement at a time, so that concurrent first calls spread as the counts say.
            PERFORM pg_advisory_xact_lock(hashtext('engram.placement'));
            cell := engram.place_tenant();
            IF cell IS NULL THEN
                RAISE EXCEPTION 'no open cell has room for a new tenant' USING ERRCODE = '53400';
            END IF;
            tenant_id := gen_random_uuid();
            schema_name := 't_' || replace(tenant_id::text, '-', '');
            INSERT INTO engram.tenants (id, key, schema_name, cell) VALUES (tenant_id, p_key, schema_name, cell);
            IF cell = 'main' THEN
                PERFORM engram.create_tenant_objects(schema_name);
            END IF;
            SELECT t.steps_version INTO done FROM engram.tenants t WHERE t.id = tenant_id;
        END IF;
    END IF;
    IF cell = 'main' THEN
        steps_current := done IS NOT NULL AND done >= (SELECT coalesce(max(s.version), '') FROM engram.tenant_steps s);
    END IF;
END
$fn$;
REVOKE ALL ON FUNCTION engram.tenant_directory(text, boolean) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION engram.tenant_directory(text, boolean) TO engram_app;

-- On a cell: the tenant with this id and key (as the directory placed it), its row, role, graph
-- and steps made unless they exist; answers its schema and whether it has every step. The same
-- id gives the same schema name on every cell. A row of another key under this id, or of this
-- key under another id, is refused: the directory and the cell disagree, and nothing is changed.
CREATE FUNCTION engram.cell_tenant(p_id uuid, p_key text, OUT schema_name text, OUT steps_current boolean)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, engram AS $fn$
DECLARE
    found_key text;
    done text;
BEGIN
    IF p_key !~ '^[A-Za-z0-9][A-Za-z0-9._:@|-]{0,199}$' THEN
        RAISE EXCEPTION 'invalid tenant key' USING ERRCODE = '22023';
    END IF;
    schema_name := 't_' || replace(p_id::text, '-', '');
    SELECT t.key, t.steps_version INTO found_key, done FROM engram.tenants t WHERE t.id = p_id;
    IF NOT FOUND THEN
        PERFORM pg_advisory_xact_lock(hashtext('engram.tenant'), hashtext(p_key));
        SELECT t.key, t.steps_version INTO found_key, done FROM engram.tenants t WHERE t.id = p_id;
    END IF;
    IF NOT FOUND THEN
        IF EXISTS (SELECT 1 FROM engram.tenants t WHERE t.key = p_key) THEN
            RAISE EXCEPTION 'this cell holds tenant % under another id', p_key USING ERRCODE = '23505';
        END IF;
        INSERT INTO engram.tenants (id, key, schema_name) VALUES (p_id, p_key, schema_name);
        PERFORM engram.create_tenant_objects(schema_name);
        SELECT t.key, t.steps_version INTO found_key, done FROM engram.tenants t WHERE t.id = p_id;
    ELSIF found_key <> p_key THEN
        RAISE EXCEPTION 'this cell holds id % under another key', p_id USING ERRCODE = '23505';
    END IF;
    steps_current := done >= (SELECT coalesce(max(s.version), '') FROM engram.tenant_steps s);
END
$fn$;
REVOKE ALL ON FUNCTION engram.cell_tenant(uuid, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION engram.cell_tenant(uuid, text) TO engram_app;

-- The tenants of each cell, for `engram cell list` and placement's callers (the owner's view).
CREATE VIEW engram.cell_load AS
    SELECT c.name, c.state, c.capacity, c.created_at, count(t.id)::integer AS tenants
    FROM engram.cells c LEFT JOIN engram.tenants t ON t.cell = c.name
    GROUP BY c.name, c.state, c.capacity, c.created_at;
REVOKE ALL ON engram.cell_load FROM PUBLIC;

-- Of these tenants, those that live in this database (a walker on the control database skips the
-- directory rows of tenants on other cells). On a cell's own database every tenant row keeps the
-- default `main`, which there means "here".
CREATE FUNCTION engram.tenants_here(p_ids uuid[]) RETURNS SETOF uuid
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, engram AS $fn$
    SELECT t.id FROM engram.tenants t WHERE t.id = ANY (p_ids) AND t.cell = 'main'
$fn$;
REVOKE ALL ON FUNCTION engram.tenants_here(uuid[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION engram.tenants_here(uuid[]) TO engram_app;

-- The embedding models are registered in the control database; each cell keeps a copy under the
-- same ids (its tenants' vectors name them). A server copies the model it embeds with to every
-- cell it reaches; the first copied as current makes the cell's tenants' vector indexes.
CREATE FUNCTION engram.adopt_embedding_model(p_id smallint, p_name text, p_dimensions integer, p_current boolean)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, engram AS $fn$
DECLARE
    t record;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext('engram.embedding_models'));
    IF NOT EXISTS (SELECT 1 FROM engram.embedding_models m WHERE m.id = p_id) THEN
        INSERT INTO engram.embedding_models (id, name, dimensions) OVERRIDING SYSTEM VALUE
        VALUES (p_id, p_name, p_dimensions);
    ELSIF NOT EXISTS (
        SELECT 1 FROM engram.embedding_models m WHERE m.id = p_id AND m.name = p_name AND m.dimensions = p_dimensions
    ) THEN
        RAISE EXCEPTION 'this cell knows embedding model % under another name or size', p_id;
    END IF;
    IF p_current AND NOT EXISTS (SELECT 1 FROM engram.embedding_models m WHERE m.current_since IS NOT NULL) THEN
        UPDATE engram.embedding_models SET current_since = now() WHERE id = p_id;
        FOR t IN SELECT schema_name FROM engram.tenants LOOP
            PERFORM engram.ensure_vector_index(t.schema_name, p_id);
        END LOOP;
    END IF;
END
$fn$;
REVOKE ALL ON FUNCTION engram.adopt_embedding_model(smallint, text, integer, boolean) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION engram.adopt_embedding_model(smallint, text, integer, boolean) TO engram_app;

-- The two functions that make tenants' vector indexes, on the tenants of this database only (in
-- the control database the directory also lists tenants living on other cells).
CREATE OR REPLACE FUNCTION engram.register_embedding_model(p_name text, p_dimensions integer,
                                                           OUT model_id smallint, OUT current_name text)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, engram AS $fn$
DECLARE
    known integer;
    t record;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext('engram.embedding_models'));
    SELECT id, dimensions INTO model_id, known FROM engram.embedding_models WHERE name = p_name;
    IF NOT FOUND THEN
        INSERT INTO engram.embedding_models (name, dimensions) VALUES (p_name, p_dimensions) RETURNING id INTO model_id;
    ELSIF known <> p_dimensions THEN
        RAISE EXCEPTION 'embedding model % is registered with % dimensions, not %', p_name, known, p_dimensions;
    END IF;
    SELECT name INTO current_name FROM engram.embedding_models WHERE current_since IS NOT NULL;
    IF NOT FOUND THEN
        UPDATE engram.embedding_models SET current_since = now() WHERE id = model_id;
        current_name := p_name;
        FOR t IN SELECT schema_name FROM engram.tenants WHERE cell = 'main' LOOP
            PERFORM engram.ensure_vector_index(t.schema_name, model_id);
        END LOOP;
    END IF;
END
$fn$;

CREATE OR REPLACE FUNCTION engram.make_embedding_model_current(p_model smallint) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, engram AS $fn$
DECLARE
    t record;
    old record;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext('engram.embedding_models'));
    UPDATE engram.embedding_models SET current_since = NULL WHERE current_since IS NOT NULL AND id <> p_model;
    UPDATE engram.embedding_models SET current_since = now() WHERE id = p_model AND current_since IS NULL;
    FOR t IN SELECT schema_name FROM engram.tenants WHERE cell = 'main' LOOP
        PERFORM engram.ensure_vector_index(t.schema_name, p_model);
        FOR old IN SELECT id FROM engram.embedding_models WHERE id <> p_model LOOP
            EXECUTE format('DROP INDEX IF EXISTS %I.%I', t.schema_name, 'search_docs_vec_' || old.id);
        END LOOP;
    END LOOP;
END
$fn$;
