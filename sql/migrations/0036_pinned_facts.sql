-- Pinned facts (docs/pinned-facts.md): an observation can be pinned, which puts it at the head of
-- every session's brief and lifts it to the top of the recall answers it belongs to, as a core
-- memory that is always in view. Observations are shared by the whole tenant (docs/private-memory.md),
-- so a pin is too: `pinned_at` says since when (NULL: not pinned, as every observation written before
-- this step), `pinned_by` who pinned it (the actor name history and `created_by` use). The partial
-- index serves the two reads that want pins (the tenant's list of them, and their count, which the
-- service bounds) without touching the unpinned rows.
CREATE FUNCTION engram.tenant_step_0036(s text) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog AS $fn$
BEGIN
    EXECUTE format($ddl$
        ALTER TABLE %1$I.observations
            ADD COLUMN pinned_at timestamptz,
            ADD COLUMN pinned_by text,
            ADD CONSTRAINT observations_pinned CHECK ((pinned_at IS NULL) = (pinned_by IS NULL));
        CREATE INDEX observations_pinned_at ON %1$I.observations (pinned_at, id) WHERE pinned_at IS NOT NULL;
    $ddl$, s);
END
$fn$;
REVOKE ALL ON FUNCTION engram.tenant_step_0036(text) FROM PUBLIC;
SELECT engram.add_tenant_step('0036', 'engram.tenant_step_0036');
