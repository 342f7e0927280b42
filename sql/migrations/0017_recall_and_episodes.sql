-- Recall: facts ranked one by one (docs/search.md, "Recall"), and episodes (docs/tools.md, "Episodes").
--
-- Episodes are raw memories that are not a fact about one entity: a message, a meeting note, a
-- captured chat, a document chunk. Each has its text, when it happened (`at`), where it came from
-- (`source`), a validity interval like an observation's, and the entities it involves
-- (`episode_entities`: speakers and participants named by the writer, and entities whose name or
-- alias the text mentions).
--
-- Search documents gain two kinds besides an entity's own text and its observations: one per
-- relation (its sentence, "Ada worked with Babbage", with its notes; `relation_id` and its edge,
-- `entity_id` and `other_id` its two ends) and one per episode (`episode_id`, no entity). `search`
-- keeps ranking entities by the first two kinds; `recall` ranks every kind, fact by fact.
CREATE FUNCTION engram.tenant_step_0017(s text) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, ag_catalog AS $fn$
BEGIN
    EXECUTE format($ddl$
        CREATE TABLE %1$I.episodes (
            id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            content     text NOT NULL,
            at          timestamptz NOT NULL,
            source      text,
            valid_from  timestamptz,
            valid_until timestamptz,
            ended_why   text,
            created_at  timestamptz NOT NULL DEFAULT now(),
            created_by  text NOT NULL,
            CHECK (valid_from < valid_until)
        );
        CREATE INDEX episodes_at ON %1$I.episodes (at DESC, id DESC);
        CREATE INDEX episodes_source ON %1$I.episodes (source, at DESC, id DESC) WHERE source IS NOT NULL;
        CREATE INDEX episodes_bounded ON %1$I.episodes (id) WHERE valid_from IS NOT NULL OR valid_until IS NOT NULL;
        CREATE TABLE %1$I.episode_entities (
            episode_id bigint NOT NULL REFERENCES %1$I.episodes (id) ON DELETE CASCADE,
            entity_id  uuid NOT NULL REFERENCES %1$I.entities (id) ON DELETE CASCADE,
            role       text NOT NULL CHECK (role IN ('speaker', 'participant', 'mentioned')),
            PRIMARY KEY (episode_id, entity_id)
        );
        CREATE INDEX episode_entities_entity ON %1$I.episode_entities (entity_id, episode_id);

        ALTER TABLE %1$I.search_docs
            ALTER COLUMN entity_id DROP NOT NULL,
            ADD COLUMN other_id    uuid REFERENCES %1$I.entities (id) ON DELETE CASCADE,
            ADD COLUMN relation_id uuid,
            ADD COLUMN edge        ag_catalog.graphid,
            ADD COLUMN episode_id  bigint REFERENCES %1$I.episodes (id) ON DELETE CASCADE,
            ADD CONSTRAINT search_docs_kind CHECK (
                CASE WHEN episode_id IS NOT NULL
                     THEN entity_id IS NULL AND observation_id IS NULL AND relation_id IS NULL
                     WHEN relation_id IS NOT NULL
                     THEN entity_id IS NOT NULL AND other_id IS NOT NULL AND edge IS NOT NULL AND observation_id IS NULL
                     ELSE entity_id IS NOT NULL AND other_id IS NULL AND edge IS NULL END);
        DROP INDEX %1$I.search_docs_source;
        CREATE UNIQUE INDEX search_docs_source ON %1$I.search_docs (entity_id, observation_id) NULLS NOT DISTINCT
            WHERE relation_id IS NULL AND episode_id IS NULL;
        CREATE UNIQUE INDEX search_docs_relation ON %1$I.search_docs (relation_id) WHERE relation_id IS NOT NULL;
        CREATE INDEX search_docs_other ON %1$I.search_docs (other_id) WHERE other_id IS NOT NULL;
        CREATE UNIQUE INDEX search_docs_episode ON %1$I.search_docs (episode_id) WHERE episode_id IS NOT NULL;
    $ddl$, s);
END
$fn$;
REVOKE ALL ON FUNCTION engram.tenant_step_0017(text) FROM PUBLIC;
SELECT engram.add_tenant_step('0017', 'engram.tenant_step_0017');
