-- Search: per tenant, one row per indexed text (an entity's name + type + description, and each
-- observation on its own) with its full-text vector and its embedding; and, in the control
-- plane, the embedding models that made the vectors. See docs/search.md.

-- Every vector records the model that made it (search_docs.model_id). The "current" model is the
-- one whose vectors are complete: the first model registered, then each model `engram reindex`
-- finished with. Vector indexes are partial per model, so two models' vectors never mix.
CREATE TABLE engram.embedding_models (
    id            smallint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name          text NOT NULL UNIQUE CHECK (length(name) BETWEEN 1 AND 320),
    dimensions    integer NOT NULL CHECK (dimensions BETWEEN 1 AND 2000),
    registered_at timestamptz NOT NULL DEFAULT now(),
    current_since timestamptz
);
CREATE UNIQUE INDEX embedding_models_one_current ON engram.embedding_models ((true)) WHERE current_since IS NOT NULL;
GRANT SELECT ON engram.embedding_models TO engram_app, engram_tenant;

-- Tenants that have texts waiting for an embedding. `generation` grows with each write that
-- leaves some, so the background filler removes a marker only if no write added work meanwhile.
CREATE TABLE engram.index_pending (
    tenant_id  uuid PRIMARY KEY REFERENCES engram.tenants (id) ON DELETE CASCADE,
    generation bigint NOT NULL DEFAULT 1
);
ALTER TABLE engram.index_pending ENABLE ROW LEVEL SECURITY;
ALTER TABLE engram.index_pending FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_self ON engram.index_pending TO engram_app, engram_tenant
    USING (tenant_id = nullif(current_setting('engram.tenant_id', true), '')::uuid)
    WITH CHECK (tenant_id = nullif(current_setting('engram.tenant_id', true), '')::uuid);
GRANT SELECT, INSERT, UPDATE, DELETE ON engram.index_pending TO engram_app, engram_tenant;

-- The HNSW index of one model's vectors in one tenant: an expression index on the vectors cast
-- to the model's dimension, limited to that model's rows.
CREATE FUNCTION engram.ensure_vector_index(s text, m smallint) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, ag_catalog, public AS $fn$
DECLARE
    dims integer;
BEGIN
    SELECT dimensions INTO STRICT dims FROM engram.embedding_models WHERE id = m;
    EXECUTE format(
        'CREATE INDEX IF NOT EXISTS %I ON %I.search_docs USING hnsw ((embedding::vector(%s)) vector_cosine_ops)'
        ' WHERE model_id = %s',
        'search_docs_vec_' || m, s, dims, m);
END
$fn$;
REVOKE ALL ON FUNCTION engram.ensure_vector_index(text, smallint) FROM PUBLIC;

CREATE FUNCTION engram.tenant_step_0005(s text) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, ag_catalog, public AS $fn$
DECLARE
    m smallint;
BEGIN
    EXECUTE format($ddl$
        CREATE TABLE %1$I.search_docs (
            id             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            entity_id      uuid NOT NULL REFERENCES %1$I.entities (id) ON DELETE CASCADE,
            observation_id bigint REFERENCES %1$I.observations (id) ON DELETE CASCADE,
            body           text NOT NULL,
            body_hash      bytea NOT NULL,
            tsv            tsvector NOT NULL GENERATED ALWAYS AS (to_tsvector('english'::regconfig, body)) STORED,
            model_id       smallint REFERENCES engram.embedding_models (id),
            embedding      vector,
            CHECK ((model_id IS NULL) = (embedding IS NULL))
        );
        CREATE UNIQUE INDEX search_docs_source ON %1$I.search_docs (entity_id, observation_id) NULLS NOT DISTINCT;
        CREATE INDEX search_docs_tsv ON %1$I.search_docs USING gin (tsv);
        CREATE INDEX search_docs_pending ON %1$I.search_docs (id) WHERE model_id IS NULL;
    $ddl$, s);
    -- Trigram similarity of names (typos, partial names), unless an earlier step made that index.
    IF NOT EXISTS (SELECT 1 FROM pg_indexes WHERE schemaname = s AND tablename = 'entities'
                   AND indexdef LIKE '%USING gin (name %gin_trgm_ops)%') THEN
        EXECUTE format('CREATE INDEX ON %I.entities USING gin (name gin_trgm_ops)', s);
    END IF;
    SELECT id INTO m FROM engram.embedding_models WHERE current_since IS NOT NULL;
    IF FOUND THEN
        PERFORM engram.ensure_vector_index(s, m);
    END IF;
END
$fn$;
SELECT engram.add_tenant_step('0005', 'engram.tenant_step_0005');

-- A server registers the model it embeds with at start-up; the first model becomes current.
-- Returns the model's id and the current model's name (which differs after a model change).
CREATE FUNCTION engram.register_embedding_model(p_name text, p_dimensions integer,
                                                OUT model_id smallint, OUT current_name text)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, engram AS $fn$
DECLARE
    known integer;
    t record;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext('engram.embedding_models'));
    SELECT id, dimensions INTO model_id, known FROM engram.embedding_models WHERE name = p_name;
    IF NOT FOUND THEN
        INSERT INTO engram.embedding_models (name, dimensions) VALUES (p_name, p_dimensions) RETURNING id INTO model_id;
    ELSIF known <> p_dimensions THEN
        RAISE EXCEPTION 'embedding model % is registered with % dimensions, not %', p_name, known, p_dimensions;
    END IF;
    SELECT name INTO current_name FROM engram.embedding_models WHERE current_since IS NOT NULL;
    IF NOT FOUND THEN
        UPDATE engram.embedding_models SET current_since = now() WHERE id = model_id;
        current_name := p_name;
        FOR t IN SELECT schema_name FROM engram.tenants LOOP
            PERFORM engram.ensure_vector_index(t.schema_name, model_id);
        END LOOP;
    END IF;
END
$fn$;
REVOKE ALL ON FUNCTION engram.register_embedding_model(text, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION engram.register_embedding_model(text, integer) TO engram_app;

-- The tenants whose texts the filler (pending only) or `engram reindex` (all) works through.
CREATE FUNCTION engram.search_tenants(p_pending_only boolean)
RETURNS TABLE (tenant_id uuid, key text, schema_name text)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, engram AS $fn$
    SELECT t.id, t.key, t.schema_name FROM engram.tenants t
    WHERE NOT p_pending_only OR EXISTS (SELECT 1 FROM engram.index_pending p WHERE p.tenant_id = t.id)
    ORDER BY t.created_at, t.id
$fn$;
REVOKE ALL ON FUNCTION engram.search_tenants(boolean) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION engram.search_tenants(boolean) TO engram_app;

-- `engram reindex`: build a model's vector index in the tenant pinned to the transaction ...
CREATE FUNCTION engram.index_tenant_vectors(p_model smallint) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, engram AS $fn$
DECLARE
    s text;
BEGIN
    SELECT schema_name INTO STRICT s FROM engram.tenants
    WHERE id = nullif(current_setting('engram.tenant_id', true), '')::uuid;
    PERFORM engram.ensure_vector_index(s, p_model);
END
$fn$;
REVOKE ALL ON FUNCTION engram.index_tenant_vectors(smallint) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION engram.index_tenant_vectors(smallint) TO engram_app, engram_tenant;

-- ... and, once every tenant's texts carry its vectors, make it current and drop the indexes of
-- the models it replaced.
CREATE FUNCTION engram.make_embedding_model_current(p_model smallint) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, engram AS $fn$
DECLARE
    t record;
    old record;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext('engram.embedding_models'));
    UPDATE engram.embedding_models SET current_since = NULL WHERE current_since IS NOT NULL AND id <> p_model;
    UPDATE engram.embedding_models SET current_since = now() WHERE id = p_model AND current_since IS NULL;
    FOR t IN SELECT schema_name FROM engram.tenants LOOP
        PERFORM engram.ensure_vector_index(t.schema_name, p_model);
        FOR old IN SELECT id FROM engram.embedding_models WHERE id <> p_model LOOP
            EXECUTE format('DROP INDEX IF EXISTS %I.%I', t.schema_name, 'search_docs_vec_' || old.id);
        END LOOP;
    END LOOP;
END
$fn$;
REVOKE ALL ON FUNCTION engram.make_embedding_model_current(smallint) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION engram.make_embedding_model_current(smallint) TO engram_app;
