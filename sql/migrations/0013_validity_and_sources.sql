-- Facts that stop being true, and where facts came from (docs/tools.md, "Validity and provenance").
--
-- Observations gain a validity interval [valid_from, valid_until) (NULL bounds: open; both NULL: valid
-- always) and the `source` their writer named (NULL for facts written before this migration).
-- Relations keep the same three values in their edge's properties (what reads show), and the edges
-- that have an interval are also listed in `rel_intervals`, with typed bounds: walks read only the
-- edge table's (start_id, end_id) index, and test an edge against this small table by its ends, so
-- that the test costs nothing while no edge has an interval (docs/architecture.md).
CREATE FUNCTION engram.tenant_step_0013(s text) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, ag_catalog AS $fn$
BEGIN
    EXECUTE format($ddl$
        ALTER TABLE %1$I.observations
            ADD COLUMN valid_from  timestamptz,
            ADD COLUMN valid_until timestamptz,
            ADD COLUMN source      text,
            ADD CONSTRAINT observations_interval CHECK (valid_from < valid_until);
        -- The few observations with an interval: reads that hide invalid ones anti-join these.
        CREATE INDEX observations_bounded ON %1$I.observations (id)
            WHERE valid_from IS NOT NULL OR valid_until IS NOT NULL;
        CREATE TABLE %1$I.rel_intervals (
            edge        ag_catalog.graphid PRIMARY KEY,
            start_id    ag_catalog.graphid NOT NULL,
            end_id      ag_catalog.graphid NOT NULL,
            valid_from  timestamptz,
            valid_until timestamptz,
            CHECK (valid_from < valid_until),
            CHECK (valid_from IS NOT NULL OR valid_until IS NOT NULL)
        );
        CREATE INDEX rel_intervals_ends ON %1$I.rel_intervals (start_id, end_id);
    $ddl$, s);
END
$fn$;
REVOKE ALL ON FUNCTION engram.tenant_step_0013(text) FROM PUBLIC;
SELECT engram.add_tenant_step('0013', 'engram.tenant_step_0013');
