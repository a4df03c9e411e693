"""``gateway tcp``: the client end of TCP tunnels through the gateway (CONNECT to a
``tcp+https`` route), with the programmatic sign-in and a token cache."""
