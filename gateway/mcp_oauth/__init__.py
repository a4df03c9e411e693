"""The gateway as the OAuth 2.1 authorization server of MCP clients.

Per MCP route host: protected resource metadata (RFC 9728), authorization server
metadata (RFC 8414) and OpenID discovery; the authorization endpoint (PKCE S256, RFC 8707
``resource``, RFC 9207 ``iss``) with the person's sign-in and consent; the token and
revocation endpoints; clients known by their client ID metadata documents (fetched
SSRF-safe) or, when turned on, registered (RFC 7591). Tokens are opaque, stored hashed
in the databroker, bound to one route's resource and to the person's session.
"""
