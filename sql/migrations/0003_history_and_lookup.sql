-- History of every change, lookup indexes for listing and substring search, and the secret that
-- signs pagination cursors (shared by all replicas because it lives in the database).
CREATE TABLE engram.server_secrets (
    name  text PRIMARY KEY,
    value bytea NOT NULL
);
INSERT INTO engram.server_secrets (name, value) VALUES ('cursor', uuid_send(gen_random_uuid()) || uuid_send(gen_random_uuid()));
GRANT SELECT ON engram.server_secrets TO engram_app;  -- read outside any tenant context

CREATE FUNCTION engram.tenant_step_0003(s text) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, ag_catalog AS $fn$
BEGIN
    EXECUTE format($ddl$
        CREATE TABLE %1$I.history (
            id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            entity_id   uuid NOT NULL,
            other_id    uuid,           -- the other end, for changes to a relation
            relation_id uuid,
            action      text NOT NULL,
            changes     jsonb NOT NULL DEFAULT '{}',
            actor       text NOT NULL,
            at          timestamptz NOT NULL DEFAULT now()
        );
        CREATE INDEX ON %1$I.history (entity_id, id DESC);
        CREATE INDEX ON %1$I.history (other_id, id DESC) WHERE other_id IS NOT NULL;
        CREATE INDEX ON %1$I.entities USING gin (name public.gin_trgm_ops);
        CREATE INDEX ON %1$I.entities (updated_at DESC, id) WHERE deleted_at IS NULL;
        CREATE INDEX ON %1$I.entities (area, topic, subtopic) WHERE deleted_at IS NULL;
        CREATE INDEX ON %1$I.observations USING gin (content public.gin_trgm_ops);
    $ddl$, s);
    -- Relations are addressed by their own uuid, kept in the edge's properties.
    EXECUTE format('CREATE UNIQUE INDEX ON %I."REL" ((ag_catalog.agtype_access_operator(VARIADIC ARRAY[properties, %L::ag_catalog.agtype])::text))', s, '"id"');
END
$fn$;
SELECT engram.add_tenant_step('0003', 'engram.tenant_step_0003');
