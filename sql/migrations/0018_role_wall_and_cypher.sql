-- The role switch closed for tenant roles. Every tenant transaction opens with
-- set_config('engram.tenant_id', …) and set_config('role', <tenant role>, …) as engram_app; after
-- that the current role is the tenant's, and SQL running there (a function a Cypher query names,
-- a nested query of query_to_xml or ts_stat, the pg_settings update rule) could call set_config
-- again to become any other tenant and claim its id, since PostgreSQL checks the role against the
-- session user (engram_app, a member of every tenant role). set_config is the one function that
-- changes a setting; only the run-time role keeps it. Settings the server needs inside a tenant
-- transaction are set with SET LOCAL statements, which the server alone writes (Tx.set_local).
-- docs/auth.md ("Switching tenants").
REVOKE EXECUTE ON FUNCTION pg_catalog.set_config(text, text, boolean) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION pg_catalog.set_config(text, text, boolean) TO engram_app;

DO $$
BEGIN
    IF has_function_privilege('engram_tenant', 'pg_catalog.set_config(text, text, boolean)', 'EXECUTE') THEN
        RAISE EXCEPTION 'tenant roles can still execute set_config; run migrations as a superuser';
    END IF;
END
$$;

-- Soft-deleted entities marked on their vertex, so that Cypher (query_graph) can leave them out:
-- their vertex keeps its place (restore brings it back with its edges), and gains `deleted: true`
-- while the entity is deleted. Kept by triggers on `entities`, whatever writes it (removal, merge,
-- restore, import); a row trigger whose WHEN clause is false for every other write costs nothing.
CREATE FUNCTION engram.entity_vertex_follows() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, ag_catalog AS $fn$
BEGIN
    EXECUTE format(
        'UPDATE %I."Entity" SET properties = CASE WHEN $4 THEN'
        ' ag_catalog.agtype_build_map(''id'', $1, ''name'', $2, ''type'', $3, ''deleted'', true)'
        ' ELSE ag_catalog.agtype_build_map(''id'', $1, ''name'', $2, ''type'', $3) END WHERE id = $5',
        TG_TABLE_SCHEMA)
    USING NEW.id::text, NEW.name, NEW.type, NEW.deleted_at IS NOT NULL, NEW.gid;
    RETURN NULL;
END
$fn$;

CREATE FUNCTION engram.tenant_step_0018(s text) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, ag_catalog AS $fn$
BEGIN
    EXECUTE format($ddl$
        CREATE TRIGGER vertex_deleted_on_insert AFTER INSERT ON %1$I.entities
            FOR EACH ROW WHEN (NEW.deleted_at IS NOT NULL) EXECUTE FUNCTION engram.entity_vertex_follows();
        CREATE TRIGGER vertex_deleted_on_update AFTER UPDATE OF deleted_at, name, type ON %1$I.entities
            FOR EACH ROW WHEN (OLD.deleted_at IS DISTINCT FROM NEW.deleted_at
                OR (NEW.deleted_at IS NOT NULL AND (OLD.name, OLD.type) IS DISTINCT FROM (NEW.name, NEW.type)))
            EXECUTE FUNCTION engram.entity_vertex_follows();
        UPDATE %1$I."Entity" v
        SET properties = ag_catalog.agtype_build_map('id', e.id::text, 'name', e.name, 'type', e.type, 'deleted', true)
        FROM %1$I.entities e WHERE e.gid = v.id AND e.deleted_at IS NOT NULL;
    $ddl$, s);
END
$fn$;
REVOKE ALL ON FUNCTION engram.tenant_step_0018(text) FROM PUBLIC;
SELECT engram.add_tenant_step('0018', 'engram.tenant_step_0018');

-- Live memory: a committed write announces what it changed on the channel `engram_changes`, which
-- every server listens to and passes on to its subscribers of the same tenant (resources/subscribe
-- and subscriptions/listen). NOTIFY is transactional: a write that rolls back announces nothing.
-- The announcement is made by this definer function, for the pinned tenant only (the tenant id
-- and role the transaction set, engram.pinned_tenant()); pg_notify is taken from PUBLIC, so a
-- query cannot announce anything, for its tenant or another. The payload: the tenant's key and
-- the names of the changed entities (deleted or not); past ~7 KB (NOTIFY's limit is 8000 bytes)
-- the names are left out, which means "anything may have changed".
REVOKE EXECUTE ON FUNCTION pg_catalog.pg_notify(text, text) FROM PUBLIC;

CREATE FUNCTION engram.announce_changes(p_ids uuid[]) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, engram AS $fn$
DECLARE
    t uuid := engram.pinned_tenant();
    tenant_key text;
    s text;
    names jsonb;
    payload text;
BEGIN
    IF p_ids IS NULL OR cardinality(p_ids) = 0 THEN
        RETURN;
    END IF;
    SELECT key, schema_name INTO tenant_key, s FROM engram.tenants WHERE id = t;
    IF cardinality(p_ids) <= 1000 THEN
        EXECUTE format('SELECT coalesce(jsonb_agg(DISTINCT name), ''[]'') FROM %I.entities WHERE id = ANY($1)', s)
            INTO names USING p_ids;
    END IF;
    payload := jsonb_build_object('t', tenant_key, 'n', names)::text;
    IF octet_length(payload) > 7000 THEN
        payload := jsonb_build_object('t', tenant_key, 'n', NULL)::text;
    END IF;
    PERFORM pg_catalog.pg_notify('engram_changes', payload);
END
$fn$;
REVOKE ALL ON FUNCTION engram.announce_changes(uuid[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION engram.announce_changes(uuid[]) TO engram_app, engram_tenant;

-- resources/subscribe (protocol 2025-11-25): the URIs a client session follows. Sessions are not
-- held by a server (any server answers any request); the client's notification stream (GET) may be
-- open on another server than the one its subscribe reached, so the subscriptions are kept here,
-- and a change to them is announced on the same channel ({"t": tenant, "s": session}). Only the
-- run-time role reads and writes them, never inside a tenant transaction. Swept a day after their
-- last subscribe.
CREATE TABLE engram.resource_subscriptions (
    session_id  text NOT NULL CHECK (session_id ~ '^[A-Za-z0-9_-]{32,64}$'),
    tenant_id   uuid NOT NULL REFERENCES engram.tenants (id) ON DELETE CASCADE,
    principal   text NOT NULL CHECK (length(principal) <= 1000),
    uri         text NOT NULL CHECK (length(uri) BETWEEN 1 AND 1000),
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (session_id, uri)
);
CREATE INDEX resource_subscriptions_age ON engram.resource_subscriptions (created_at);
GRANT SELECT, INSERT, UPDATE, DELETE ON engram.resource_subscriptions TO engram_app;
GRANT EXECUTE ON FUNCTION pg_catalog.pg_notify(text, text) TO engram_app;
