-- Extensions and the run-time role.
-- Migrations run as the database owner; the server runs as engram_app, which may not bypass
-- row-level security, own objects, or create schemas.
CREATE EXTENSION IF NOT EXISTS age;
CREATE EXTENSION IF NOT EXISTS vector SCHEMA public;
CREATE EXTENSION IF NOT EXISTS pg_trgm SCHEMA public;

DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'engram_app') THEN
        CREATE ROLE engram_app NOLOGIN NOSUPERUSER NOBYPASSRLS NOCREATEDB NOCREATEROLE;
    END IF;
END
$$;

CREATE SCHEMA IF NOT EXISTS engram;
REVOKE ALL ON SCHEMA engram FROM PUBLIC;
GRANT USAGE ON SCHEMA engram TO engram_app;
GRANT USAGE ON SCHEMA ag_catalog TO engram_app;
REVOKE CREATE ON SCHEMA public FROM PUBLIC;
