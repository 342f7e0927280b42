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
