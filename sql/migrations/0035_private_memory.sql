-- Private and shared memory inside a tenant (docs/private-memory.md). An episode belongs either to
-- the tenant's shared memory (`owner` NULL, as every episode written before this step) or to one
-- principal (`owner`: its key, 32 hex digits the server derives from the verified token's issuer
-- and subject). Its search document carries the same owner, copied by a trigger from the episode
-- (never by the caller). Row-level security on both tables and on the episodes' links lets a
-- tenant transaction see the shared rows and the rows of the principal its opening named
-- (`engram.principal`, set with the tenant id by `_opening` in app/store/database.py, which a
-- tenant role cannot change: it has no set_config, migration 0018) — or every row when that
-- setting says `system`, the server's own work (the embedding filler, reindexing, retention, the
-- operator's commands). An unset or empty setting sees the shared rows only. The tables' owner
-- (migrations, backups, moves: owner connections) is not subject to the policies.

-- PostgreSQL evaluates a query's own conditions on a table with row-level security after the
-- policy's, and so cannot use an index for a condition whose function is not LEAKPROOF: the
-- full-text match `tsvector @@ tsquery` (ts_match_vq) is not marked so, and search and recall
-- would scan every search document (measured on 200k rows: 0.2 ms with the GIN index, 80 ms
-- without). The match reveals nothing about its arguments but its result (no error depends on
-- them), and no SQL a caller writes ever reaches these tables (query_graph's Cypher reads the
-- graph's labels only), so it is declared LEAKPROOF. Only a superuser may; without one the
-- policies still hold and word rankings are slower (the migration says so).
DO $$
BEGIN
    IF (SELECT rolsuper FROM pg_roles WHERE rolname = current_user) THEN
        ALTER FUNCTION pg_catalog.ts_match_vq(tsvector, tsquery) LEAKPROOF;
    ELSE
        RAISE WARNING 'ts_match_vq could not be marked LEAKPROOF (not a superuser): word search scans each tenant''s documents';
    END IF;
END
$$;

-- pg_stats hides the statistics of a table whose rows a policy filters, so the words that are
-- common among a tenant's search documents (which a search leaves out of its query) are read
-- here, for the pinned tenant only: words only, never a row.
CREATE FUNCTION engram.common_words(p_min_texts double precision) RETURNS text[]
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, engram AS $fn$
DECLARE
    s text;
    words text[];
BEGIN
    SELECT schema_name INTO s FROM engram.tenants WHERE id = engram.pinned_tenant();
    SELECT array_agg(x.word) INTO words
    FROM pg_stats st, pg_class c,
         unnest(st.most_common_elems::text::text[], st.most_common_elem_freqs) AS x(word, freq)
    WHERE st.schemaname = s AND st.tablename = 'search_docs' AND st.attname = 'tsv'
      AND c.oid = to_regclass(format('%I.search_docs', s)) AND x.word IS NOT NULL AND x.freq * c.reltuples > p_min_texts;
    RETURN coalesce(words, '{}');
END
$fn$;
REVOKE ALL ON FUNCTION engram.common_words(double precision) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION engram.common_words(double precision) TO engram_tenant;

-- A search document's owner is its episode's: set on every write of an episode's document, and
-- kept when an episode's owner changes. Definer functions: they read and write rows whatever the
-- caller may see, and only copy the owner from one to the other.
CREATE FUNCTION engram.search_doc_owner() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog AS $fn$
BEGIN
    IF NEW.episode_id IS NULL THEN
        NEW.owner := NULL;
    ELSE
        EXECUTE format('SELECT owner FROM %I.episodes WHERE id = $1', TG_TABLE_SCHEMA) INTO NEW.owner
            USING NEW.episode_id;
    END IF;
    RETURN NEW;
END
$fn$;
REVOKE ALL ON FUNCTION engram.search_doc_owner() FROM PUBLIC;

CREATE FUNCTION engram.episode_owner_follows() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog AS $fn$
BEGIN
    EXECUTE format('UPDATE %I.search_docs SET owner = $1 WHERE episode_id = $2', TG_TABLE_SCHEMA)
        USING NEW.owner, NEW.id;
    RETURN NULL;
END
$fn$;
REVOKE ALL ON FUNCTION engram.episode_owner_follows() FROM PUBLIC;

CREATE FUNCTION engram.tenant_step_0035(s text) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog AS $fn$
BEGIN
    EXECUTE format($ddl$
        ALTER TABLE %1$I.episodes ADD COLUMN owner text CHECK (owner ~ '^[0-9a-f]{32}$');
        CREATE INDEX episodes_owner ON %1$I.episodes (owner) WHERE owner IS NOT NULL;
        ALTER TABLE %1$I.search_docs ADD COLUMN owner text CHECK (owner ~ '^[0-9a-f]{32}$'),
            ADD CONSTRAINT search_docs_owner CHECK (owner IS NULL OR episode_id IS NOT NULL);
        CREATE TRIGGER search_doc_owner BEFORE INSERT OR UPDATE OF episode_id, owner ON %1$I.search_docs
            FOR EACH ROW WHEN (NEW.episode_id IS NOT NULL OR NEW.owner IS NOT NULL)
            EXECUTE FUNCTION engram.search_doc_owner();
        CREATE TRIGGER episode_owner_follows AFTER UPDATE OF owner ON %1$I.episodes
            FOR EACH ROW WHEN (OLD.owner IS DISTINCT FROM NEW.owner) EXECUTE FUNCTION engram.episode_owner_follows();

        ALTER TABLE %1$I.episodes ENABLE ROW LEVEL SECURITY;
        CREATE POLICY shared_or_own ON %1$I.episodes TO %1$I USING (%2$s) WITH CHECK (%2$s);
        ALTER TABLE %1$I.search_docs ENABLE ROW LEVEL SECURITY;
        CREATE POLICY shared_or_own ON %1$I.search_docs TO %1$I USING (%2$s) WITH CHECK (%2$s);
        -- An episode's links show only with the episode (its row, as the caller may see it).
        ALTER TABLE %1$I.episode_entities ENABLE ROW LEVEL SECURITY;
        CREATE POLICY with_episode ON %1$I.episode_entities TO %1$I
            USING (EXISTS (SELECT 1 FROM %1$I.episodes p WHERE p.id = episode_id))
            WITH CHECK (EXISTS (SELECT 1 FROM %1$I.episodes p WHERE p.id = episode_id));

        ALTER TABLE %1$I.hook_settings ADD COLUMN private boolean;
    $ddl$, s,
    -- shared, the caller's own, or any for the server's own work
    $p$owner IS NULL OR owner = current_setting('engram.principal', true)
       OR current_setting('engram.principal', true) = 'system'$p$);
END
$fn$;
REVOKE ALL ON FUNCTION engram.tenant_step_0035(text) FROM PUBLIC;
SELECT engram.add_tenant_step('0035', 'engram.tenant_step_0035');
