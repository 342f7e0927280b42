"""What a model reads: every answer's text, printed so that it fits the tokens its caller gives it.

One module per tools module of app/mcp/tools/, of the same name, holds that module's answers; a
budgeted answer is a `Form` (form.py), its measure derived from its printer. `brief.py` prints the
hooks' brief (app/hooks/routes.py); `text.py` and `summaries.py` hold the pieces every answer uses.
Neither transport lives here: no MCP type, no HTTP, and no store.
"""
