"""What the test modules share besides conftest.py's fixtures: a test module imports shared helpers
from here, never from another test module (tests/test_layers.py holds it).

server: `engram serve` and the CLI as subprocesses, this suite's database; client: the SDK's MCP
client and readers of its answers; auth, browser, console: the built-in authorization server,
headless Chromium and the console; cells: the local clusters' fixtures; chart: the Helm chart
rendered; search, transfer: the index and export/import; and the parties a test plays
(oauth_agent, oidc_issuer, local_http, embedding_server), the embedding reference and the fuzzer.
"""
