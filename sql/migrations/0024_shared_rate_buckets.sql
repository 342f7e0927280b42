-- Tenant call rates that hold across replicas: one token bucket per tenant in the database, from
-- which each replica takes a few calls' worth of tokens at a time (docs/scaling.md, "Rate limits").
-- UNLOGGED: no WAL per call, and not on standbys; a crash empties it, which only refills every
-- bucket (a tenant may then make its burst again).
CREATE UNLOGGED TABLE engram.rate_buckets (
    tenant_id uuid PRIMARY KEY,
    tokens    double precision NOT NULL,
    at        timestamptz NOT NULL
);
REVOKE ALL ON engram.rate_buckets FROM PUBLIC;

-- Take up to p_want tokens from the tenant's bucket (refilled at p_rate per second up to p_burst
-- since it was last used): how many were granted, and when none, the seconds until one is there.
-- The row lock orders concurrent takers of one tenant; other tenants' rows are not touched.
CREATE FUNCTION engram.take_tokens(
    p_tenant uuid, p_want integer, p_rate double precision, p_burst integer,
    OUT granted integer, OUT wait_seconds double precision
)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, engram AS $fn$
DECLARE
    have double precision;
    was timestamptz;
    now_ timestamptz := clock_timestamp();
BEGIN
    IF p_want < 1 OR p_rate <= 0 OR p_burst < 1 THEN
        RAISE EXCEPTION 'take_tokens: want, rate and burst must be positive' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT b.tokens, b.at INTO have, was FROM engram.rate_buckets b WHERE b.tenant_id = p_tenant FOR UPDATE;
    IF NOT FOUND THEN
        INSERT INTO engram.rate_buckets (tenant_id, tokens, at) VALUES (p_tenant, p_burst, now_)
        ON CONFLICT (tenant_id) DO NOTHING;
        SELECT b.tokens, b.at INTO have, was FROM engram.rate_buckets b WHERE b.tenant_id = p_tenant FOR UPDATE;
    END IF;
    have := least(p_burst::double precision, have + greatest(extract(epoch FROM now_ - was), 0) * p_rate);
    granted := least(p_want::double precision, floor(have))::integer;
    UPDATE engram.rate_buckets SET tokens = have - granted, at = now_ WHERE tenant_id = p_tenant;
    wait_seconds := CASE WHEN granted > 0 THEN 0 ELSE (1 - have) / p_rate END;
END
$fn$;
REVOKE ALL ON FUNCTION engram.take_tokens(uuid, integer, double precision, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION engram.take_tokens(uuid, integer, double precision, integer) TO engram_app;

-- A deleted tenant's bucket goes with it.
CREATE FUNCTION engram.forget_rate_bucket() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, engram AS $fn$
BEGIN
    DELETE FROM engram.rate_buckets WHERE tenant_id = OLD.id;
    RETURN NULL;
END
$fn$;
REVOKE ALL ON FUNCTION engram.forget_rate_bucket() FROM PUBLIC;
CREATE TRIGGER forget_rate_bucket AFTER DELETE ON engram.tenants FOR EACH ROW EXECUTE FUNCTION engram.forget_rate_bucket();
