-- Fair sharing: per-tenant overrides of the server's default limits (NULL: the default), and per
-- tenant the running totals that quotas are checked against, kept by each write's own transaction.
CREATE TABLE engram.tenant_limits (
    tenant_id        uuid PRIMARY KEY REFERENCES engram.tenants (id) ON DELETE CASCADE,
    rate             double precision CHECK (rate >= 0),    -- tool calls per second; 0: unlimited
    burst            integer CHECK (burst >= 1),
    max_concurrent   integer CHECK (max_concurrent >= 1),
    max_entities     bigint CHECK (max_entities >= 0),      -- quotas; 0: unlimited
    max_observations bigint CHECK (max_observations >= 0),
    max_text_bytes   bigint CHECK (max_text_bytes >= 0),
    updated_at       timestamptz NOT NULL DEFAULT now()
);
ALTER TABLE engram.tenant_limits ENABLE ROW LEVEL SECURITY;
ALTER TABLE engram.tenant_limits FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_self ON engram.tenant_limits FOR SELECT TO engram_app, engram_tenant
    USING (tenant_id = nullif(current_setting('engram.tenant_id', true), '')::uuid);
GRANT SELECT ON engram.tenant_limits TO engram_app, engram_tenant;

-- One row per tenant: live entities, the observations of live entities and their UTF-8 bytes.
-- Writes add what they changed at their end and check the quotas against the result.
CREATE FUNCTION engram.tenant_step_0009(s text) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, ag_catalog AS $fn$
BEGIN
    EXECUTE format($ddl$
        CREATE TABLE %1$I.usage_totals (
            one          boolean PRIMARY KEY DEFAULT true CHECK (one),
            entities     bigint NOT NULL,
            observations bigint NOT NULL,
            text_bytes   bigint NOT NULL
        );
        INSERT INTO %1$I.usage_totals (entities, observations, text_bytes)
        SELECT (SELECT count(*) FROM %1$I.entities WHERE deleted_at IS NULL), count(o.id),
               coalesce(sum(octet_length(o.content)), 0)
        FROM %1$I.observations o JOIN %1$I.entities e ON e.id = o.entity_id AND e.deleted_at IS NULL;
    $ddl$, s);
END
$fn$;
REVOKE ALL ON FUNCTION engram.tenant_step_0009(text) FROM PUBLIC;
SELECT engram.add_tenant_step('0009', 'engram.tenant_step_0009');
