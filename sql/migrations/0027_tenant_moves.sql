-- Moving a tenant between cells (`engram tenant move KEY CELL`, docs/scaling.md "Moving a
-- tenant"): one progress row per move in the control database, each step recorded so that a move
-- stopped at any step is continued by running the command again.

CREATE TABLE engram.tenant_moves (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant_id   uuid NOT NULL REFERENCES engram.tenants (id) ON DELETE CASCADE,
    source      text NOT NULL REFERENCES engram.cells (name),
    target      text NOT NULL REFERENCES engram.cells (name),
    step        text NOT NULL CHECK (step ~ '^[a-z_]{1,40}$'),
    started_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now(),
    switched_at timestamptz,
    finished_at timestamptz,
    error       text CHECK (length(error) <= 2000),
    CHECK (source <> target)
);
-- At most one unfinished move per tenant.
CREATE UNIQUE INDEX tenant_moves_running ON engram.tenant_moves (tenant_id) WHERE finished_at IS NULL;
REVOKE ALL ON engram.tenant_moves FROM PUBLIC;

-- On the cell a tenant leaves: NULL while it serves the tenant, 'writes' once its writes are
-- fenced (the move is catching up), 'all' once the directory points elsewhere (its reads fenced
-- too). A call refused there is told `unavailable` (reason `tenant_moving`) and resolves again.
ALTER TABLE engram.tenants ADD COLUMN fenced text CHECK (fenced IN ('writes', 'all'));

-- Whether this database fences tenant `p_id` (the run-time role asks after a refused statement).
CREATE FUNCTION engram.tenant_fenced(p_id uuid) RETURNS boolean
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, engram AS $fn$
    SELECT coalesce((SELECT t.fenced IS NOT NULL FROM engram.tenants t WHERE t.id = p_id), false)
$fn$;
REVOKE ALL ON FUNCTION engram.tenant_fenced(uuid) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION engram.tenant_fenced(uuid) TO engram_app;
