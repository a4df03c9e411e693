"""Network plumbing shared by the proxy and the ``gateway tcp`` client: client
endpoints and name resolution (``endpoints``), and the flow-controlled byte pipe between
two connections (``pipe``). Nothing here knows about HTTP or routes."""
