-- query_graph's value bounds VOLATILE (docs/security.md, "query_graph"). Declared STABLE (migration
-- 0028), they let the planner pull a WITH's subquery up into the query around it and copy the
-- expression of each of its values into every place the value is used: `WITH s + s AS s` ten times,
-- then `s = t` 120 times, built s about 2^10 times per use and grew one backend by over 1 GB,
-- though every value stayed within its bound. PostgreSQL does not pull up a subquery whose columns
-- hold a volatile function, so each value is computed once per row and the bound holds. The parser
-- writes every computed WITH item through engram.cypher_bounded for the same reason (app/store/cypher/age.py).
ALTER FUNCTION engram.cypher_bounded(ag_catalog.agtype) VOLATILE;
ALTER FUNCTION engram.cypher_replace(ag_catalog.agtype, ag_catalog.agtype, ag_catalog.agtype) VOLATILE;
ALTER FUNCTION engram.cypher_split(ag_catalog.agtype, ag_catalog.agtype) VOLATILE;
ALTER FUNCTION engram.cypher_sort_key_size(ag_catalog.agtype) VOLATILE;

-- With enable_sort off (the store sets it for query_graph, so that DISTINCT and grouping hash rather
-- than sort: a sort's agtype comparisons keep what they allocate), a grouping holds every group's
-- collect() list at once: 10,000 groups each collecting a 128 KB value grew a backend by 221 MB in
-- 2 s. So every collected value is also counted for the whole statement (the transaction's setting
-- engram.query_collected, which the store resets to 0 before each query; SECURITY DEFINER only to
-- keep that counter, as engram.cypher_sort_key), refused past 64 times the value bound (8 MiB).
CREATE FUNCTION engram.cypher_collected(bytes bigint) RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog AS $fn$
DECLARE
    n bigint := coalesce(nullif(current_setting('engram.query_collected', true), ''), '0')::bigint + bytes;
    bound bigint := 64 * engram.cypher_value_bound();
BEGIN
    PERFORM set_config('engram.query_collected', n::text, true);
    IF n > bound THEN
        RAISE EXCEPTION 'the query''s collect() lists grew past % bytes', bound USING ERRCODE = 'program_limit_exceeded';
    END IF;
END
$fn$;
REVOKE ALL ON FUNCTION engram.cypher_collected(bigint) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION engram.cypher_collected(bigint) TO engram_tenant;

CREATE OR REPLACE FUNCTION engram.cypher_collect_step(total bigint, v ag_catalog.agtype) RETURNS bigint
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE AS $fn$
BEGIN
    IF v IS NULL THEN
        RETURN total;
    END IF;
    total := total + pg_column_size(v);
    IF total > engram.cypher_value_bound() THEN
        RAISE EXCEPTION 'collect grew past % bytes', engram.cypher_value_bound()
            USING ERRCODE = 'program_limit_exceeded';
    END IF;
    PERFORM engram.cypher_collected(pg_column_size(v));
    RETURN total;
END
$fn$;
