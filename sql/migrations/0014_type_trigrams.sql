-- Substring search over names, types and observations (the memory dialect's search_nodes, the
-- `text` filter of find_entities) gathers matching ids from three trigram indexes instead of
-- testing every entity: names and observations had theirs; types get one here.
CREATE FUNCTION engram.tenant_step_0014(s text) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, ag_catalog AS $fn$
BEGIN
    EXECUTE format('CREATE INDEX entities_type_trgm ON %I.entities USING gin (type public.gin_trgm_ops)', s);
END
$fn$;
REVOKE ALL ON FUNCTION engram.tenant_step_0014(text) FROM PUBLIC;
SELECT engram.add_tenant_step('0014', 'engram.tenant_step_0014');
