-- The retention sweep's list of tenants read every tenant row of this database, and a row whose
-- schema is not here (on `main`, the directory row of a tenant that moved to another cell) failed
-- the whole list: no tenant was swept. Tenants whose tables are not in this database are skipped.
CREATE OR REPLACE FUNCTION engram.tenants_past_retention(p_days double precision) RETURNS SETOF text
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, engram AS $fn$
DECLARE
    r record;
    past boolean;
BEGIN
    FOR r IN SELECT key, schema_name FROM engram.tenants
             WHERE fenced IS NULL
               AND to_regclass(format('%I.entities', schema_name)) IS NOT NULL
               AND to_regclass(format('%I.limits', schema_name)) IS NOT NULL
             ORDER BY key LOOP
        EXECUTE format(
            'SELECT EXISTS (SELECT 1 FROM %1$I.entities WHERE deleted_at < now() - make_interval(secs =>'
            ' 86400 * coalesce((SELECT deleted_retention_days FROM %1$I.limits), $1)))', r.schema_name)
            INTO past USING p_days;
        IF past THEN
            RETURN NEXT r.key;
        END IF;
    END LOOP;
END
$fn$;
