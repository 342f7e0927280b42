-- The audit log (one row per successful mutating tool call, written in the call's own
-- transaction, so a change without its audit row cannot exist) and per-tenant usage counts
-- (kept out of metric labels, whose cardinality must stay bounded).
CREATE TABLE engram.audit (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant_id   uuid NOT NULL REFERENCES engram.tenants (id) ON DELETE CASCADE,
    at          timestamptz NOT NULL DEFAULT now(),
    subject     text NOT NULL,
    client_id   text NOT NULL,
    tool        text NOT NULL,
    affected    text[] NOT NULL DEFAULT '{}',
    outcome     text NOT NULL,
    duration_ms real NOT NULL,
    request_id  text NOT NULL
);
CREATE INDEX ON engram.audit (tenant_id, id DESC);
CREATE INDEX ON engram.audit (at);
ALTER TABLE engram.audit ENABLE ROW LEVEL SECURITY;
ALTER TABLE engram.audit FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_self ON engram.audit FOR ALL TO engram_app, engram_tenant
    USING (tenant_id = nullif(current_setting('engram.tenant_id', true), '')::uuid)
    WITH CHECK (tenant_id = nullif(current_setting('engram.tenant_id', true), '')::uuid);
GRANT SELECT, INSERT ON engram.audit TO engram_tenant;

CREATE TABLE engram.usage (
    tenant_id uuid NOT NULL REFERENCES engram.tenants (id) ON DELETE CASCADE,
    day       date NOT NULL,
    tool      text NOT NULL,
    calls     bigint NOT NULL DEFAULT 0,
    errors    bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant_id, day, tool)
);
ALTER TABLE engram.usage ENABLE ROW LEVEL SECURITY;
ALTER TABLE engram.usage FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_self ON engram.usage FOR SELECT TO engram_app, engram_tenant
    USING (tenant_id = nullif(current_setting('engram.tenant_id', true), '')::uuid);
GRANT SELECT ON engram.usage TO engram_app, engram_tenant;

-- Counts gathered in memory by each server and added here every few seconds, for all tenants at
-- once: [{"tenant": <tenant key>, "tool": ..., "calls": n, "errors": n}, ...].
CREATE FUNCTION engram.add_usage(p_counts jsonb) RETURNS void
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, engram AS $fn$
    INSERT INTO engram.usage AS u (tenant_id, day, tool, calls, errors)
    SELECT t.id, current_date, c->>'tool', (c->>'calls')::bigint, (c->>'errors')::bigint
    FROM jsonb_array_elements(p_counts) AS c JOIN engram.tenants t ON t.key = c->>'tenant'
    ON CONFLICT (tenant_id, day, tool)
    DO UPDATE SET calls = u.calls + excluded.calls, errors = u.errors + excluded.errors
$fn$;
REVOKE ALL ON FUNCTION engram.add_usage(jsonb) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION engram.add_usage(jsonb) TO engram_app;

CREATE FUNCTION engram.tenant_count() RETURNS bigint
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, engram AS $fn$
    SELECT count(*) FROM engram.tenants
$fn$;
REVOKE ALL ON FUNCTION engram.tenant_count() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION engram.tenant_count() TO engram_app;
