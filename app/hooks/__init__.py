"""How a client's hooks become memory: the hook endpoints, one adapter per client, over the
neutral hooks service (app/services/hooks.py).

    POST /hooks/claude-code ─▶ routes.py     credential, body bound, fair share, deadline; every
                               │             failure answered `200 {}`; the brief printed
                               ▼             (app/answers/brief.py)
                     claude_code.py          Claude Code's input, which of its events is which
                               │             `HookCall` (start, prompt, a turn to keep), its JSON
                               ▼
                 app/services/hooks.py       neutral verbs: `start`, `prompt`, `keep`

`client.py` is the seam: a `Client` says where a client posts, its input model, how its events
are named in metrics and logs, what each event asks of the service, and how the client reads an
answer. The service names no client's events; a tenant's `events` setting lists the client event
names it answers (Claude Code's today).

Adding a second client (Cursor's or Codex's hooks, say) is one module here: its input model (a
pydantic model, unknown fields ignored, every field bounded), a `call(event) -> HookCall` that
maps its events onto the neutral verbs (the event's name in `HookCall.event`, checked against the
tenant's `events` setting), its answer's JSON, and a `Client(...)` value listed in
`routes.CLIENTS`. Its route, credential rules, deadline and outage answers come from routes.py.
"""
