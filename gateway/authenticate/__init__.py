"""Sign-in with an OpenID Connect provider, sign-out, and the key set endpoint."""
