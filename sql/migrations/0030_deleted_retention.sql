-- Soft-deleted entities are kept for a retention period, then erased for good by the server's
-- sweep (app/services/purges.py, docs/security.md "Forgetting"). The period is the server's
-- ENGRAM_DELETED_RETENTION_DAYS unless the tenant has its own (`engram tenant set-limits
-- --deleted-retention-days N`).
CREATE FUNCTION engram.tenant_step_0030(s text) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog AS $fn$
BEGIN
    EXECUTE format($ddl$
        ALTER TABLE %1$I.limits ADD COLUMN deleted_retention_days double precision
            CHECK (deleted_retention_days >= 0);
        CREATE INDEX entities_deleted_at ON %1$I.entities (deleted_at) WHERE deleted_at IS NOT NULL;
    $ddl$, s);
END
$fn$;
REVOKE ALL ON FUNCTION engram.tenant_step_0030(text) FROM PUBLIC;
SELECT engram.add_tenant_step('0030', 'engram.tenant_step_0030');

-- The keys of the tenants (served by this database) holding entities deleted longer ago than their
-- retention (their own, or `p_days`): what the sweep visits. The run-time role sees no other
-- tenant's rows, hence a definer function that answers keys only.
CREATE FUNCTION engram.tenants_past_retention(p_days double precision) RETURNS SETOF text
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, engram AS $fn$
DECLARE
    r record;
    past boolean;
BEGIN
    FOR r IN SELECT key, schema_name FROM engram.tenants WHERE fenced IS NULL ORDER BY key LOOP
        EXECUTE format(
            'SELECT EXISTS (SELECT 1 FROM %1$I.entities WHERE deleted_at < now() - make_interval(secs =>'
            ' 86400 * coalesce((SELECT deleted_retention_days FROM %1$I.limits), $1)))', r.schema_name)
            INTO past USING p_days;
        IF past THEN
            RETURN NEXT r.key;
        END IF;
    END LOOP;
END
$fn$;
REVOKE ALL ON FUNCTION engram.tenants_past_retention(double precision) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION engram.tenants_past_retention(double precision) TO engram_app;
