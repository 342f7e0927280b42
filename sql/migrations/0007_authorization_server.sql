-- The built-in OAuth 2.1 authorization server. Everything it remembers lives here, so any replica
-- answers any step of a sign-in. These tables belong to the server, not to a tenant: the run-time
-- role reaches them directly, tenant roles (what a tool call's transaction runs as) not at all.
-- Every credential (password, refresh token, code, session, client secret) is stored as a hash.

CREATE TABLE engram.users (
    id            uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    username      text NOT NULL UNIQUE CHECK (username ~ '^[a-z0-9][a-z0-9._@+-]{0,99}$'),
    display_name  text NOT NULL DEFAULT '' CHECK (length(display_name) <= 200),
    password_hash text,  -- argon2id; NULL for users who sign in only through an upstream provider
    created_at    timestamptz NOT NULL DEFAULT now(),
    disabled_at   timestamptz
);

-- Upstream identities (OpenID Connect providers) linked to a user.
CREATE TABLE engram.user_identities (
    provider   text NOT NULL,
    subject    text NOT NULL,
    user_id    uuid NOT NULL REFERENCES engram.users (id) ON DELETE CASCADE,
    email      text,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (provider, subject)
);

-- Which tenants a user may act for, and how: reader, writer or admin. Tenants are created on
-- first use, so a membership names the tenant by its key.
CREATE TABLE engram.memberships (
    user_id    uuid NOT NULL REFERENCES engram.users (id) ON DELETE CASCADE,
    tenant_key text NOT NULL CHECK (tenant_key ~ '^[A-Za-z0-9][A-Za-z0-9._:@|-]{0,199}$'),
    role       text NOT NULL CHECK (role IN ('reader', 'writer', 'admin')),
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (user_id, tenant_key)
);
CREATE INDEX ON engram.memberships (tenant_key);

-- Browser sessions of signed-in users (the cookie holds the secret, this table its hash).
CREATE TABLE engram.web_sessions (
    id_hash    bytea PRIMARY KEY,
    user_id    uuid NOT NULL REFERENCES engram.users (id) ON DELETE CASCADE,
    created_at timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz NOT NULL
);
CREATE INDEX ON engram.web_sessions (expires_at);

-- Clients: registered dynamically (RFC 7591), configured by an operator, or known by their
-- metadata document (the client id is its URL; cached here only as the server's own memory).
CREATE TABLE engram.oauth_clients (
    client_id    text PRIMARY KEY CHECK (length(client_id) <= 2000),
    kind         text NOT NULL CHECK (kind IN ('dynamic', 'static')),
    metadata     jsonb NOT NULL,
    secret_hash  bytea,
    created_at   timestamptz NOT NULL DEFAULT now(),
    last_used_at timestamptz
);
CREATE INDEX ON engram.oauth_clients (created_at) WHERE last_used_at IS NULL;

-- Authorization requests between /authorize and the user's answer on the consent page.
CREATE TABLE engram.oauth_requests (
    id_hash    bytea PRIMARY KEY,
    client_id  text NOT NULL,
    params     jsonb NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz NOT NULL
);
CREATE INDEX ON engram.oauth_requests (expires_at);

-- A grant: what one consent gave one client. Refresh tokens rotate inside it; reusing an old one
-- revokes the whole family, and revoking the family ends its access tokens too (`sid` claim).
CREATE TABLE engram.oauth_families (
    id         uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    client_id  text NOT NULL,
    user_id    uuid NOT NULL REFERENCES engram.users (id) ON DELETE CASCADE,
    tenant_key text NOT NULL,
    scopes     text[] NOT NULL,
    resource   text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    revoked_at timestamptz,
    revoked_why text
);
CREATE INDEX ON engram.oauth_families (user_id);
CREATE INDEX ON engram.oauth_families (client_id);
CREATE INDEX ON engram.oauth_families (revoked_at) WHERE revoked_at IS NOT NULL;

CREATE TABLE engram.oauth_codes (
    code_hash      bytea PRIMARY KEY,
    family_id      uuid NOT NULL REFERENCES engram.oauth_families (id) ON DELETE CASCADE,
    code_challenge text NOT NULL,
    redirect_uri   text NOT NULL,
    redirect_uri_explicit boolean NOT NULL,
    expires_at     timestamptz NOT NULL,
    used_at        timestamptz
);
CREATE INDEX ON engram.oauth_codes (expires_at);

CREATE TABLE engram.oauth_refresh_tokens (
    token_hash bytea PRIMARY KEY,
    family_id  uuid NOT NULL REFERENCES engram.oauth_families (id) ON DELETE CASCADE,
    created_at timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz NOT NULL,
    used_at    timestamptz
);
CREATE INDEX ON engram.oauth_refresh_tokens (family_id);
CREATE INDEX ON engram.oauth_refresh_tokens (expires_at);

-- Remembered consent: the page is skipped when a user already approved this client for these
-- scopes (or more) on this tenant.
CREATE TABLE engram.oauth_consents (
    user_id    uuid NOT NULL REFERENCES engram.users (id) ON DELETE CASCADE,
    client_id  text NOT NULL,
    tenant_key text NOT NULL,
    scopes     text[] NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (user_id, client_id, tenant_key)
);

-- Token-signing keys, shared by every replica. A key signs from activates_at; after rotation the
-- old one keeps verifying (and stays in the JWKS) until retires_at, past its tokens' lifetime.
CREATE TABLE engram.signing_keys (
    kid          text PRIMARY KEY,
    private_jwk  jsonb NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    activates_at timestamptz NOT NULL DEFAULT now(),
    retires_at   timestamptz
);

-- Fixed-window counters for rate limits and sign-in throttling, shared by every replica.
CREATE TABLE engram.rate_windows (
    bucket    text NOT NULL,
    window_no bigint NOT NULL,
    hits      integer NOT NULL,
    PRIMARY KEY (bucket, window_no)
);

-- What happened at the authorization server: sign-ins, consents, tokens issued and revoked.
CREATE TABLE engram.auth_events (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at         timestamptz NOT NULL DEFAULT now(),
    event      text NOT NULL,
    outcome    text NOT NULL,
    user_id    uuid,
    client_id  text,
    tenant_key text,
    detail     text NOT NULL DEFAULT '',
    request_id text NOT NULL DEFAULT ''
);
CREATE INDEX ON engram.auth_events (at);

GRANT SELECT, INSERT, UPDATE, DELETE ON
    engram.users, engram.user_identities, engram.memberships, engram.web_sessions, engram.oauth_clients,
    engram.oauth_requests, engram.oauth_families, engram.oauth_codes, engram.oauth_refresh_tokens,
    engram.oauth_consents, engram.signing_keys, engram.rate_windows
    TO engram_app;
GRANT INSERT ON engram.auth_events TO engram_app;

INSERT INTO engram.server_secrets (name, value) VALUES ('csrf', uuid_send(gen_random_uuid()) || uuid_send(gen_random_uuid())) ON CONFLICT DO NOTHING;
