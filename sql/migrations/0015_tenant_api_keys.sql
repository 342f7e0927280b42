-- API keys made and revoked by a tenant's own administrators (the console), without giving the
-- run-time role any write privilege on engram.api_keys: two SECURITY DEFINER functions that act
-- only on the tenant the transaction is pinned to (engram.tenant_id, with the current role being
-- that tenant's role, as the server's tenant transaction sets them) — never on a tenant named by
-- an argument — check every bound again, and write the action's audit row in the same statement,
-- so a key made or revoked this way without its audit row cannot exist. The secret is made and
-- hashed by the server (app/auth/apikeys.py, shared with `engram apikey`); only its hash arrives.
-- docs/auth.md, docs/security.md.

-- The tenant of the calling transaction, or an error. Not executable by anyone but its owner: the
-- definer functions below call it as the owner. Inside a SECURITY DEFINER function the `role`
-- setting is still the caller's SET ROLE, so a tenant id set without entering its tenant role
-- (a session with no tenant context, or one half set up) is refused.
CREATE FUNCTION engram.pinned_tenant() RETURNS uuid
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, engram AS $fn$
DECLARE
    pinned text := nullif(current_setting('engram.tenant_id', true), '');
    t uuid;
BEGIN
    IF pinned IS NULL OR pinned !~ '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$' THEN
        RAISE EXCEPTION 'no tenant transaction' USING ERRCODE = 'insufficient_privilege';
    END IF;
    SELECT id INTO t FROM engram.tenants WHERE id = pinned::uuid AND schema_name = current_setting('role');
    IF t IS NULL THEN
        RAISE EXCEPTION 'no tenant transaction' USING ERRCODE = 'insufficient_privilege';
    END IF;
    RETURN t;
END
$fn$;
REVOKE ALL ON FUNCTION engram.pinned_tenant() FROM PUBLIC;

-- Bounds on the audit fields the server passes (subject, client id, action, request id).
CREATE FUNCTION engram.key_audit(t uuid, p_key text, p_subject text, p_client_id text, p_tool text,
                                 p_duration_ms real, p_request_id text) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, engram AS $fn$
BEGIN
    IF p_subject IS NULL OR length(p_subject) NOT BETWEEN 1 AND 300
       OR p_client_id IS NULL OR length(p_client_id) > 300
       OR p_tool IS NULL OR p_tool !~ '^[a-z_:]{1,100}$'
       OR p_request_id IS NULL OR length(p_request_id) > 200
       OR p_duration_ms IS NULL OR NOT p_duration_ms BETWEEN 0 AND 86400000 THEN
        RAISE EXCEPTION 'invalid audit fields' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    INSERT INTO engram.audit (tenant_id, subject, client_id, tool, affected, outcome, duration_ms, request_id)
    VALUES (t, p_subject, p_client_id, p_tool, ARRAY['api-key:' || p_key], 'ok', p_duration_ms, p_request_id);
END
$fn$;
REVOKE ALL ON FUNCTION engram.key_audit(uuid, text, text, text, text, real, text) FROM PUBLIC;

-- A new key for the pinned tenant: id and hash made by the server, a name of at most 200
-- characters, one to three distinct Engram scopes, an expiry in the future and within ten years
-- (or none). At most 100 unrevoked keys per tenant (`program_limit_exceeded` beyond). Answers
-- when the key was made.
CREATE FUNCTION engram.create_api_key(p_id text, p_secret_hash bytea, p_name text, p_scopes text[],
                                      p_expires_at timestamptz, p_subject text, p_client_id text, p_tool text,
                                      p_duration_ms real, p_request_id text) RETURNS timestamptz
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, engram AS $fn$
DECLARE
    t uuid := engram.pinned_tenant();
    made timestamptz;
BEGIN
    IF p_id IS NULL OR p_id !~ '^[a-z0-9]{12}$'
       OR p_secret_hash IS NULL OR octet_length(p_secret_hash) <> 32
       OR p_name IS NULL OR length(p_name) > 200 OR p_name ~ '[[:cntrl:]]'
       OR p_scopes IS NULL OR cardinality(p_scopes) NOT BETWEEN 1 AND 3
       OR NOT p_scopes <@ ARRAY['memory:read', 'memory:write', 'memory:admin']
       OR (SELECT count(DISTINCT s) FROM unnest(p_scopes) AS s) <> cardinality(p_scopes)
       OR p_expires_at <= now() OR p_expires_at > now() + interval '3651 days' THEN
        RAISE EXCEPTION 'invalid API key' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    PERFORM pg_advisory_xact_lock(hashtextextended('engram.api_keys:' || t::text, 0));
    IF (SELECT count(*) FROM engram.api_keys WHERE tenant_id = t AND revoked_at IS NULL) >= 100 THEN
        RAISE EXCEPTION 'too many API keys' USING ERRCODE = 'program_limit_exceeded';
    END IF;
    INSERT INTO engram.api_keys (id, tenant_id, name, secret_hash, scopes, expires_at)
    VALUES (p_id, t, p_name, p_secret_hash, p_scopes, p_expires_at)
    RETURNING created_at INTO made;
    PERFORM engram.key_audit(t, p_id, p_subject, p_client_id, p_tool, p_duration_ms, p_request_id);
    RETURN made;
END
$fn$;
REVOKE ALL ON FUNCTION engram.create_api_key(text, bytea, text, text[], timestamptz, text, text, text, real, text)
    FROM PUBLIC;
-- Called inside the tenant transaction, whose current role is the tenant's role (a member of
-- engram_tenant); engram_app holds it for callers outside one, who are refused by pinned_tenant().
GRANT EXECUTE ON FUNCTION engram.create_api_key(text, bytea, text, text[], timestamptz, text, text, text, real, text)
    TO engram_app, engram_tenant;

-- Revoke one of the pinned tenant's unrevoked keys; false if it has none by that id (another
-- tenant's key is not found, and stays as it was).
CREATE FUNCTION engram.revoke_api_key(p_id text, p_subject text, p_client_id text, p_tool text,
                                      p_duration_ms real, p_request_id text) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, engram AS $fn$
DECLARE
    t uuid := engram.pinned_tenant();
BEGIN
    IF p_id IS NULL OR p_id !~ '^[a-z0-9]{12}$' THEN
        RAISE EXCEPTION 'invalid API key id' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    UPDATE engram.api_keys SET revoked_at = now() WHERE id = p_id AND tenant_id = t AND revoked_at IS NULL;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    PERFORM engram.key_audit(t, p_id, p_subject, p_client_id, p_tool, p_duration_ms, p_request_id);
    RETURN true;
END
$fn$;
REVOKE ALL ON FUNCTION engram.revoke_api_key(text, text, text, text, real, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION engram.revoke_api_key(text, text, text, text, real, text) TO engram_app, engram_tenant;
