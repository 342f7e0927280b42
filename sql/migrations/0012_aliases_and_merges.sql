-- Aliases and merges. Per tenant: `aliases`, other names an entity answers to (unique in the tenant
-- case-insensitively, by `alias_key`, whoever holds them, so that no spelling can mean two
-- aliases); and `entities.merged_into`, set on an entity merge_entities folded into another (it is
-- then soft-deleted), so that a lookup by its old id leads to the survivor. No foreign key: an
-- import may bring a merged entity before its survivor. docs/tools.md, "Merges and aliases".
CREATE FUNCTION engram.tenant_step_0012(s text) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, ag_catalog AS $fn$
BEGIN
    EXECUTE format($ddl$
        ALTER TABLE %1$I.entities ADD COLUMN merged_into uuid;
        CREATE INDEX entities_merged_into ON %1$I.entities (merged_into) WHERE merged_into IS NOT NULL;
        CREATE TABLE %1$I.aliases (
            alias_key  text PRIMARY KEY,
            alias      text NOT NULL,
            entity_id  uuid NOT NULL REFERENCES %1$I.entities (id) ON DELETE CASCADE,
            created_at timestamptz NOT NULL DEFAULT now(),
            created_by text NOT NULL
        );
        CREATE INDEX aliases_entity ON %1$I.aliases (entity_id, alias_key);
        -- find_duplicates compares each name with its neighbours in name order, forwards (the
        -- name_key index) and backwards (this one), so that its work per call stays bounded.
        CREATE INDEX entities_reverse_name_key ON %1$I.entities (reverse(name_key)) WHERE deleted_at IS NULL;
        CREATE INDEX aliases_alias_trgm ON %1$I.aliases USING gin (alias public.gin_trgm_ops);
    $ddl$, s);
END
$fn$;
REVOKE ALL ON FUNCTION engram.tenant_step_0012(text) FROM PUBLIC;
SELECT engram.add_tenant_step('0012', 'engram.tenant_step_0012');
