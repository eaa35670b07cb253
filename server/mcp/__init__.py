"""docqa as an MCP server (the official `mcp` SDK): the `ask`, `search`, `read_passage` and `list_strategies`
tools, at `/mcp` of the API (streamable HTTP, authenticated like the API) and over stdio (`docqa mcp`).

Modules: `tools` (the tools and their schemas), `auth_bridge` (the API's authentication in front of `/mcp`),
`progress` (steps as progress notifications), `errors` (API errors as tool errors), `app` (the server and its
HTTP endpoint), `stdio` (`docqa mcp`).
"""
