-- Memory in the loop (docs/clients.md): an assistant's hooks (Claude Code's SessionStart,
-- UserPromptSubmit, Stop, ...) post to /hooks/claude-code, which recalls for each prompt and keeps
-- each turn as an episode. Per tenant:
-- - `episodes.capture_key`: a captured turn's idempotency key (its session and turn), unique, so a
--   delivery retried or a session resumed keeps each turn once;
-- - `hook_sessions`: per session, how many prompts it has had and the last one's digest (the turn
--   a Stop answers, a prompt delivered twice told from a new one), shared by every replica;
-- - `hook_shown`: per session, the facts already injected, so a session is never given the same
--   fact twice (clients keep injected context in their history);
-- - `hook_settings`: the tenant's own switches (capture, events, deny-list, budgets, threshold);
--   NULL: the server's default.
CREATE FUNCTION engram.tenant_step_0031(s text) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog AS $fn$
BEGIN
    EXECUTE format($ddl$
        ALTER TABLE %1$I.episodes ADD COLUMN capture_key text CHECK (length(capture_key) <= 100);
        CREATE UNIQUE INDEX episodes_capture_key ON %1$I.episodes (capture_key) WHERE capture_key IS NOT NULL;
        CREATE TABLE %1$I.hook_sessions (
            session    text PRIMARY KEY CHECK (length(session) BETWEEN 1 AND 200),
            turns      integer NOT NULL DEFAULT 0 CHECK (turns >= 0),
            last_user  bytea,
            answered   boolean NOT NULL DEFAULT false,
            started_at timestamptz NOT NULL DEFAULT now(),
            updated_at timestamptz NOT NULL DEFAULT now()
        );
        CREATE INDEX hook_sessions_updated ON %1$I.hook_sessions (updated_at);
        CREATE TABLE %1$I.hook_shown (
            session text NOT NULL CHECK (length(session) BETWEEN 1 AND 200),
            fact    bigint NOT NULL,
            at      timestamptz NOT NULL DEFAULT now(),
            PRIMARY KEY (session, fact)
        );
        CREATE INDEX hook_shown_at ON %1$I.hook_shown (at);
        CREATE TABLE %1$I.hook_settings (
            one           boolean PRIMARY KEY DEFAULT true CHECK (one),
            capture       boolean,
            events        text[] CHECK (cardinality(events) <= 20),
            deny          text[] CHECK (cardinality(deny) <= 100),
            prompt_tokens integer CHECK (prompt_tokens BETWEEN 0 AND 20000),
            start_tokens  integer CHECK (start_tokens BETWEEN 0 AND 20000),
            min_score     double precision CHECK (min_score BETWEEN 0 AND 1),
            updated_at    timestamptz NOT NULL DEFAULT now()
        );
    $ddl$, s);
END
$fn$;
REVOKE ALL ON FUNCTION engram.tenant_step_0031(text) FROM PUBLIC;
SELECT engram.add_tenant_step('0031', 'engram.tenant_step_0031');
