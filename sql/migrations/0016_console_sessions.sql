-- Sessions of the console (a first-party client of the built-in authorization server), shared by
-- every replica. The browser holds a random cookie; a row is found by a hash of it, and its tokens
-- and CSRF secret are sealed (AES-256-GCM) with a key derived from it, so the table alone opens
-- nothing. `version` orders token refreshes; `refreshing_until` lets one request at a time spend
-- the session's single-use refresh token.
CREATE TABLE engram.console_sessions (
    id_hash          bytea PRIMARY KEY CHECK (length(id_hash) = 32),
    sealed           text NOT NULL CHECK (length(sealed) <= 16384),
    version          integer NOT NULL DEFAULT 1,
    refreshing_until timestamptz,
    notice           text NOT NULL DEFAULT '' CHECK (length(notice) <= 2000),
    created_at       timestamptz NOT NULL DEFAULT now(),
    expires_at       timestamptz NOT NULL
);
CREATE INDEX ON engram.console_sessions (expires_at);

GRANT SELECT, INSERT, UPDATE, DELETE ON engram.console_sessions TO engram_app;
