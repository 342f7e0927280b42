-- query_graph's memory bounds, enforced where the values are built (docs/security.md, "query_graph").
-- The parser (app/store/cypher_read.py) writes every operation that can make a value larger than
-- its inputs (`+`, list and map literals, replace, split, toUpper/toLower, reverse) as
-- engram.cypher_bounded(...), and every collect(x) beside engram.cypher_collect_guard(x): the
-- first refuses a value past `engram.query_value_bytes`, the second a collected list past it, both
-- as SQLSTATE 54000 (program_limit_exceeded). The bound is the transaction's setting (SET LOCAL by
-- the store before each query); unset, 1 MiB. A caller cannot name these functions (the parser
-- accepts no schema-qualified call).

CREATE FUNCTION engram.cypher_value_bound() RETURNS bigint
LANGUAGE sql STABLE PARALLEL SAFE AS $fn$
    SELECT coalesce(nullif(current_setting('engram.query_value_bytes', true), '')::bigint, 1048576)
$fn$;

CREATE FUNCTION engram.cypher_bounded(v ag_catalog.agtype) RETURNS ag_catalog.agtype
LANGUAGE plpgsql STABLE PARALLEL SAFE AS $fn$
BEGIN
    IF pg_column_size(v) > engram.cypher_value_bound() THEN
        RAISE EXCEPTION 'a value grew past % bytes', engram.cypher_value_bound()
            USING ERRCODE = 'program_limit_exceeded';
    END IF;
    RETURN v;
END
$fn$;

-- The guard's state: the bytes collected so far in its group.
CREATE FUNCTION engram.cypher_collect_step(total bigint, v ag_catalog.agtype) RETURNS bigint
LANGUAGE plpgsql STABLE PARALLEL SAFE AS $fn$
BEGIN
    IF v IS NULL THEN
        RETURN total;
    END IF;
    total := total + pg_column_size(v);
    IF total > engram.cypher_value_bound() THEN
        RAISE EXCEPTION 'collect grew past % bytes', engram.cypher_value_bound()
            USING ERRCODE = 'program_limit_exceeded';
    END IF;
    RETURN total;
END
$fn$;

CREATE FUNCTION engram.cypher_collect_none(total bigint) RETURNS ag_catalog.agtype
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $fn$ SELECT NULL::ag_catalog.agtype $fn$;

CREATE AGGREGATE engram.cypher_collect_guard(ag_catalog.agtype) (
    SFUNC = engram.cypher_collect_step, STYPE = bigint, INITCOND = '0', FINALFUNC = engram.cypher_collect_none
);

REVOKE ALL ON FUNCTION engram.cypher_value_bound(), engram.cypher_bounded(ag_catalog.agtype),
    engram.cypher_collect_step(bigint, ag_catalog.agtype), engram.cypher_collect_none(bigint),
    engram.cypher_collect_guard(ag_catalog.agtype) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION engram.cypher_value_bound(), engram.cypher_bounded(ag_catalog.agtype),
    engram.cypher_collect_step(bigint, ag_catalog.agtype), engram.cypher_collect_none(bigint),
    engram.cypher_collect_guard(ag_catalog.agtype) TO engram_tenant;

-- replace(a, b, c) can grow quadratically (every b in a replaced by c): its result's size is
-- bounded from its arguments' before AGE builds it.
CREATE FUNCTION engram.cypher_replace(a ag_catalog.agtype, b ag_catalog.agtype, c ag_catalog.agtype)
RETURNS ag_catalog.agtype
LANGUAGE plpgsql STABLE PARALLEL SAFE AS $fn$
DECLARE
    empty constant integer := pg_column_size('""'::ag_catalog.agtype);
    found bigint;
BEGIN
    IF a IS NULL OR b IS NULL OR c IS NULL THEN
        RETURN NULL;
    END IF;
    found := pg_column_size(a) / greatest(pg_column_size(b) - empty, 1) + 1;
    IF pg_column_size(c) > pg_column_size(b)
        AND pg_column_size(a) + found * (pg_column_size(c) - empty) > engram.cypher_value_bound() THEN
        RAISE EXCEPTION 'replace would grow past % bytes', engram.cypher_value_bound()
            USING ERRCODE = 'program_limit_exceeded';
    END IF;
    RETURN ag_catalog.age_replace(a, b, c);
END
$fn$;
REVOKE ALL ON FUNCTION engram.cypher_replace(ag_catalog.agtype, ag_catalog.agtype, ag_catalog.agtype) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION engram.cypher_replace(ag_catalog.agtype, ag_catalog.agtype, ag_catalog.agtype)
    TO engram_tenant;

-- ORDER BY: AGE's agtype comparison leaves what it allocates in the sort's memory until the sort
-- ends (about 300 bytes and most of the compared strings per comparison), so a sort's memory grows
-- with rows × log(rows) × key size. Every row that enters a sort passes engram.cypher_sort_key once:
-- it counts the rows of the statement's sorts (in the transaction's setting engram.query_sorted,
-- which the store resets to 0 before each query) and refuses past `engram.query_sort_rows`
-- (default 10,000) rows or a key past `engram.query_sort_key_bytes` (default 512). SECURITY
-- DEFINER only to keep that counter: a tenant role may not call set_config() (docs/auth.md).
CREATE FUNCTION engram.cypher_sort_key(v ag_catalog.agtype) RETURNS ag_catalog.agtype
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog AS $fn$
DECLARE
    n bigint := coalesce(nullif(current_setting('engram.query_sorted', true), ''), '0')::bigint + 1;
    rows_bound bigint := coalesce(nullif(current_setting('engram.query_sort_rows', true), ''), '10000')::bigint;
    key_bound bigint := coalesce(nullif(current_setting('engram.query_sort_key_bytes', true), ''), '512')::bigint;
BEGIN
    PERFORM set_config('engram.query_sorted', n::text, true);
    IF n > rows_bound THEN
        RAISE EXCEPTION 'ORDER BY sorts at most % rows', rows_bound USING ERRCODE = 'program_limit_exceeded';
    END IF;
    IF pg_column_size(v) > key_bound THEN
        RAISE EXCEPTION 'an ORDER BY key is at most % bytes', key_bound USING ERRCODE = 'program_limit_exceeded';
    END IF;
    RETURN v;
END
$fn$;

-- A sort's second and further keys: their size only (the row was counted by its first key).
CREATE FUNCTION engram.cypher_sort_key_size(v ag_catalog.agtype) RETURNS ag_catalog.agtype
LANGUAGE plpgsql STABLE PARALLEL SAFE AS $fn$
BEGIN
    IF pg_column_size(v) > coalesce(nullif(current_setting('engram.query_sort_key_bytes', true), ''), '512')::bigint THEN
        RAISE EXCEPTION 'an ORDER BY key is at most % bytes', current_setting('engram.query_sort_key_bytes', true)
            USING ERRCODE = 'program_limit_exceeded';
    END IF;
    RETURN v;
END
$fn$;
REVOKE ALL ON FUNCTION engram.cypher_sort_key(ag_catalog.agtype), engram.cypher_sort_key_size(ag_catalog.agtype)
    FROM PUBLIC;
GRANT EXECUTE ON FUNCTION engram.cypher_sort_key(ag_catalog.agtype), engram.cypher_sort_key_size(ag_catalog.agtype)
    TO engram_tenant;

-- split(a, b): AGE holds about a kilobyte per piece while it builds the list, so the pieces are
-- counted first and refused past a 64th of the value bound (2,048 pieces at 128 KiB).
CREATE FUNCTION engram.cypher_split(a ag_catalog.agtype, b ag_catalog.agtype) RETURNS ag_catalog.agtype
LANGUAGE plpgsql STABLE PARALLEL SAFE AS $fn$
DECLARE
    ta text;
    tb text;
    pieces bigint;
BEGIN
    IF a IS NOT NULL AND b IS NOT NULL AND ag_catalog.age_tostring(a) = a AND ag_catalog.age_tostring(b) = b THEN
        ta := a::text;
        tb := b::text;
        pieces := CASE WHEN tb = '' THEN length(ta)
                       ELSE (length(ta) - length(replace(ta, tb, ''))) / length(tb) + 1 END;
        IF pieces > engram.cypher_value_bound() / 64 THEN
            RAISE EXCEPTION 'split would make more than % pieces', engram.cypher_value_bound() / 64
                USING ERRCODE = 'program_limit_exceeded';
        END IF;
    END IF;
    RETURN engram.cypher_bounded(ag_catalog.age_split(a, b));
END
$fn$;
REVOKE ALL ON FUNCTION engram.cypher_split(ag_catalog.agtype, ag_catalog.agtype) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION engram.cypher_split(ag_catalog.agtype, ag_catalog.agtype) TO engram_tenant;
