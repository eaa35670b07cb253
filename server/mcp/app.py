"""The docqa MCP server: its tools on the official SDK's `MCPServer`, served over streamable HTTP inside the API's
FastAPI app (`/mcp`) or over stdio (`docqa mcp`).

Usage (what `create_app` does):
    mcp_http = McpHttp(context)
    app.add_route("/mcp", mcp_http.endpoint, methods=["GET", "POST", "DELETE"], include_in_schema=False)
    async with mcp_http.running(): ...  # in the app's lifespan
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from mcp.server.mcpserver import MCPServer
from mcp.server.transport_security import TransportSecuritySettings

from docqa import __version__
from docqa.server.context import ServerContext
from docqa.server.mcp.auth_bridge import AuthenticatedEndpoint, caller_of_request
from docqa.server.mcp.tools import CallerOf, DocqaTools

INSTRUCTIONS = (
    "docqa answers questions from the organisation's documents, with citations, as the signed-in user: only "
    "documents that user may read are searched, quoted or cited, and every answer is an audited run. Use `ask` for "
    "an answer, `search` to find passages, `read_passage` to read a cited passage in its document."
)


def build_mcp_server(context: ServerContext, caller_of: CallerOf) -> MCPServer:
    server: MCPServer = MCPServer("docqa", title="docqa", version=__version__, instructions=INSTRUCTIONS,
                                  log_level="WARNING")
    DocqaTools(context, caller_of).register(server)
    return server


class McpHttp:
    """The MCP server of one API worker over streamable HTTP.

    Stateless: each request stands alone (gunicorn may hand a client's next request to another worker), so
    every request is authenticated on its own, and a tool call's progress and result travel on the response
    stream of the request that made it; closing that stream cancels the call.
    """

    def __init__(self, context: ServerContext) -> None:
        self.server = build_mcp_server(context, caller_of_request)
        # The session manager is what serves requests; the Starlette app around it is not used.
        self.server.streamable_http_app(
            stateless_http=True, json_response=False, max_request_body_size=context.settings.max_json_bytes,
            # Every request carries a bearer credential, so the browser-facing DNS-rebinding check adds nothing.
            transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
        )
        self.endpoint = AuthenticatedEndpoint(context, self.server.session_manager.handle_request)

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        async with self.server.session_manager.run():
            yield
