"""The Model Context Protocol on the wire, as plain values and functions (no I/O).

What the data plane reads of an MCP route's traffic: the JSON-RPC messages of a request
body (single and batch, read incrementally to the route's limit, never a prefix), the
2026-07-28 ``Mcp-Method``/``Mcp-Name`` headers and their agreement with the body, the
``Origin`` rule, and the list responses (JSON or an SSE stream) filtered to what the
caller's policy allows. The authorization server MCP clients sign in through is
``gateway.mcp_oauth``.
"""
