-- API keys for headless agents. Only a hash of each secret is stored. The server looks a key up
-- by its public id (before it knows the tenant) through a definer function; listing and
-- revoking are the owner's (the `engram apikey` command).
CREATE TABLE engram.api_keys (
    id           text PRIMARY KEY CHECK (id ~ '^[a-z0-9]{12}$'),
    tenant_id    uuid NOT NULL REFERENCES engram.tenants (id) ON DELETE CASCADE,
    name         text NOT NULL DEFAULT '' CHECK (length(name) <= 200),
    secret_hash  bytea NOT NULL,
    scopes       text[] NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    expires_at   timestamptz,
    revoked_at   timestamptz
);
CREATE INDEX ON engram.api_keys (tenant_id);
ALTER TABLE engram.api_keys ENABLE ROW LEVEL SECURITY;
ALTER TABLE engram.api_keys FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_self ON engram.api_keys FOR SELECT TO engram_app, engram_tenant
    USING (tenant_id = nullif(current_setting('engram.tenant_id', true), '')::uuid);
GRANT SELECT ON engram.api_keys TO engram_app, engram_tenant;

CREATE FUNCTION engram.api_key(p_id text, OUT tenant_key text, OUT secret_hash bytea, OUT scopes text[],
                               OUT expires_at timestamptz, OUT revoked_at timestamptz)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, engram AS $fn$
    SELECT t.key, k.secret_hash, k.scopes, k.expires_at, k.revoked_at
    FROM engram.api_keys k JOIN engram.tenants t ON t.id = k.tenant_id
    WHERE k.id = p_id
$fn$;
REVOKE ALL ON FUNCTION engram.api_key(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION engram.api_key(text) TO engram_app;
