-- A tenant is exactly one schema (and one role): the per-tenant rows that lived in shared tables of
-- schema `engram` (audit log, pending-embedding marker, usage counts, limit overrides) move into the
-- tenant's schema, so that one `FOR TABLES IN SCHEMA` publication carries the whole tenant
-- (docs/scaling.md, "A tenant is one schema"). The step creates the tables and moves the tenant's
-- rows (delete-returning-insert: exactly the rows taken are the rows kept). The shared tables stay,
-- empty and unused, until a later migration drops them: dropping them here would break a server of
-- the previous version still serving during the upgrade.

CREATE FUNCTION engram.tenant_step_0025(s text) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, ag_catalog AS $fn$
DECLARE
    t uuid;
BEGIN
    SELECT id INTO STRICT t FROM engram.tenants WHERE schema_name = s;
    EXECUTE format($ddl$
        CREATE TABLE %1$I.audit (
            id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            at          timestamptz NOT NULL DEFAULT now(),
            subject     text NOT NULL,
            client_id   text NOT NULL,
            tool        text NOT NULL,
            affected    text[] NOT NULL DEFAULT '{}',
            outcome     text NOT NULL,
            duration_ms real NOT NULL,
            request_id  text NOT NULL
        );
        CREATE INDEX audit_at ON %1$I.audit (at);
        CREATE TABLE %1$I.index_pending (
            one        boolean PRIMARY KEY DEFAULT true CHECK (one),
            generation bigint NOT NULL DEFAULT 1
        );
        CREATE TABLE %1$I.usage (
            day    date NOT NULL,
            tool   text NOT NULL,
            calls  bigint NOT NULL DEFAULT 0,
            errors bigint NOT NULL DEFAULT 0,
            PRIMARY KEY (day, tool)
        );
        CREATE TABLE %1$I.limits (
            one              boolean PRIMARY KEY DEFAULT true CHECK (one),
            rate             double precision CHECK (rate >= 0),
            burst            integer CHECK (burst >= 1),
            max_concurrent   integer CHECK (max_concurrent >= 1),
            max_entities     bigint CHECK (max_entities >= 0),
            max_observations bigint CHECK (max_observations >= 0),
            max_text_bytes   bigint CHECK (max_text_bytes >= 0),
            updated_at       timestamptz NOT NULL DEFAULT now()
        );
        -- Audit ids are kept (the audit_log tool's cursors name them).
        WITH moved AS (DELETE FROM engram.audit WHERE tenant_id = $1 RETURNING *)
        INSERT INTO %1$I.audit (id, at, subject, client_id, tool, affected, outcome, duration_ms, request_id)
        OVERRIDING SYSTEM VALUE
        SELECT id, at, subject, client_id, tool, affected, outcome, duration_ms, request_id FROM moved ORDER BY id;
        SELECT setval(pg_get_serial_sequence('%1$I.audit', 'id'), max(id)) FROM %1$I.audit HAVING max(id) IS NOT NULL;
        WITH moved AS (DELETE FROM engram.index_pending WHERE tenant_id = $1 RETURNING generation)
        INSERT INTO %1$I.index_pending (generation) SELECT generation FROM moved;
        WITH moved AS (DELETE FROM engram.usage WHERE tenant_id = $1 RETURNING *)
        INSERT INTO %1$I.usage (day, tool, calls, errors) SELECT day, tool, calls, errors FROM moved;
        WITH moved AS (DELETE FROM engram.tenant_limits WHERE tenant_id = $1 RETURNING *)
        INSERT INTO %1$I.limits (rate, burst, max_concurrent, max_entities, max_observations, max_text_bytes, updated_at)
        SELECT rate, burst, max_concurrent, max_entities, max_observations, max_text_bytes, updated_at FROM moved;
    $ddl$, s) USING t;
END
$fn$;
REVOKE ALL ON FUNCTION engram.tenant_step_0025(text) FROM PUBLIC;
SELECT engram.add_tenant_step('0025', 'engram.tenant_step_0025');

-- Least privilege within the schema, as the shared tables had it: the audit log is appended to,
-- never changed, by the tenant; usage counts and limits are written only outside the tenant's
-- transactions (the usage flusher's definer function, the administration).
CREATE OR REPLACE FUNCTION engram.grant_tenant_tables(s text) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog AS $fn$
BEGIN
    EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA %I TO %I', s, s);
    EXECUTE format('GRANT USAGE ON ALL SEQUENCES IN SCHEMA %I TO %I', s, s);
    IF to_regclass(format('%I.audit', s)) IS NOT NULL THEN
        EXECUTE format('REVOKE UPDATE, DELETE ON %I.audit FROM %I', s, s);
        EXECUTE format('REVOKE INSERT, UPDATE, DELETE ON %I.usage, %I.limits FROM %I', s, s, s);
    END IF;
END
$fn$;

-- The tenant's schema, for a definer function that writes there outside the tenant's transaction.
-- Waits while `engram migrate` applies the tenant's steps (its row lock), so a tenant's rows are
-- written either before its step moved them or into its new tables, never lost between.
CREATE FUNCTION engram.tenant_rows_schema(t uuid) RETURNS text
LANGUAGE plpgsql SET search_path = pg_catalog AS $fn$
DECLARE
    s text;
BEGIN
    SELECT schema_name INTO s FROM engram.tenants WHERE id = t FOR KEY SHARE;
    IF s IS NOT NULL AND to_regclass(format('%I.audit', s)) IS NOT NULL THEN
        RETURN s;
    END IF;
    RETURN NULL;
END
$fn$;
REVOKE ALL ON FUNCTION engram.tenant_rows_schema(uuid) FROM PUBLIC;

-- Usage counts of many tenants at once, each added to its tenant's schema (the shared table for a
-- tenant whose step has not run yet).
CREATE OR REPLACE FUNCTION engram.add_usage(p_counts jsonb) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, engram AS $fn$
DECLARE
    t record;
    s text;
BEGIN
    FOR t IN SELECT n.id, jsonb_agg(c) AS counts
             FROM jsonb_array_elements(p_counts) AS c JOIN engram.tenants n ON n.key = c->>'tenant'
             GROUP BY n.id ORDER BY n.id LOOP
        s := engram.tenant_rows_schema(t.id);
        IF s IS NULL THEN
            INSERT INTO engram.usage AS u (tenant_id, day, tool, calls, errors)
            SELECT t.id, current_date, c->>'tool', (c->>'calls')::bigint, (c->>'errors')::bigint
            FROM jsonb_array_elements(t.counts) AS c
            ON CONFLICT (tenant_id, day, tool)
            DO UPDATE SET calls = u.calls + excluded.calls, errors = u.errors + excluded.errors;
        ELSE
            EXECUTE format(
                'INSERT INTO %I.usage AS u (day, tool, calls, errors)'
                ' SELECT current_date, c->>''tool'', sum((c->>''calls'')::bigint), sum((c->>''errors'')::bigint)'
                ' FROM jsonb_array_elements($1) AS c GROUP BY c->>''tool'''
                ' ON CONFLICT (day, tool) DO UPDATE SET calls = u.calls + excluded.calls, errors = u.errors + excluded.errors',
                s) USING t.counts;
        END IF;
    END LOOP;
END
$fn$;

-- API-key changes made in a tenant's transaction write their audit row into its schema.
CREATE OR REPLACE FUNCTION engram.key_audit(t uuid, p_key text, p_subject text, p_client_id text, p_tool text,
                                            p_duration_ms real, p_request_id text) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, engram AS $fn$
DECLARE
    s text;
BEGIN
    IF p_subject IS NULL OR length(p_subject) NOT BETWEEN 1 AND 300
       OR p_client_id IS NULL OR length(p_client_id) > 300
       OR p_tool IS NULL OR p_tool !~ '^[a-z_:]{1,100}$'
       OR p_request_id IS NULL OR length(p_request_id) > 200
       OR p_duration_ms IS NULL OR NOT p_duration_ms BETWEEN 0 AND 86400000 THEN
        RAISE EXCEPTION 'invalid audit fields' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT schema_name INTO STRICT s FROM engram.tenants WHERE id = t;
    EXECUTE format(
        'INSERT INTO %I.audit (subject, client_id, tool, affected, outcome, duration_ms, request_id)'
        ' VALUES ($1, $2, $3, $4, ''ok'', $5, $6)', s)
    USING p_subject, p_client_id, p_tool, ARRAY['api-key:' || p_key], p_duration_ms, p_request_id;
END
$fn$;

-- The tenants whose texts the filler (pending only) or `engram reindex` (all) works through: for
-- "pending only" each tenant's own marker is looked at (one index probe per tenant), a page at a
-- time in creation order after (p_after_at, p_after_id).
CREATE FUNCTION engram.search_tenants(p_pending_only boolean, p_after_at timestamptz, p_after_id uuid, p_limit integer)
RETURNS TABLE (tenant_id uuid, key text, schema_name text, created_at timestamptz)
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, engram AS $fn$
DECLARE
    t record;
    pending boolean;
    n integer := 0;
BEGIN
    FOR t IN SELECT x.id, x.key, x.schema_name, x.created_at FROM engram.tenants x
             WHERE p_after_at IS NULL OR (x.created_at, x.id) > (p_after_at, p_after_id)
             ORDER BY x.created_at, x.id LOOP
        EXIT WHEN n >= p_limit;
        IF p_pending_only THEN
            IF to_regclass(format('%I.index_pending', t.schema_name)) IS NULL THEN
                pending := EXISTS (SELECT 1 FROM engram.index_pending p WHERE p.tenant_id = t.id);
            ELSE
                EXECUTE format('SELECT EXISTS (SELECT 1 FROM %I.index_pending)', t.schema_name) INTO pending;
            END IF;
            CONTINUE WHEN NOT pending;
        END IF;
        tenant_id := t.id; key := t.key; schema_name := t.schema_name; created_at := t.created_at;
        n := n + 1;
        RETURN NEXT;
    END LOOP;
END
$fn$;
REVOKE ALL ON FUNCTION engram.search_tenants(boolean, timestamptz, uuid, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION engram.search_tenants(boolean, timestamptz, uuid, integer) TO engram_app;
