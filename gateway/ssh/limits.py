"""The bounds on what an SSH client may make the gateway hold (SECURITY.md)."""

from __future__ import annotations

LOGIN_GRACE = 60.0  # seconds from connect to authenticated, unless a sign-in is pending
SIGN_IN_WAIT = 300.0  # seconds a connection waits for its person to sign in
UNAUTHENTICATED_PER_ADDRESS = 10  # connections not yet authenticated, per client address
UNAUTHENTICATED_TOTAL = 500
PREAUTH_BUFFER = 64 * 1024  # bytes buffered before authentication
AUTH_ATTEMPTS = 10  # failed authentication requests per connection
KEY_QUERIES = 32  # publickey queries (no signature) per connection
KEY_BLOB = 1100  # bytes of a user's public key: up to RSA 8192 (verifying costs grow)
CHANNELS_PER_CONNECTION = 10
WINDOW = 2 * 1024 * 1024  # each channel's receive window
MAX_PACKET = 32768  # each channel's largest data packet
RECHECK_SECONDS = 1.0  # continuous authorization: how often each connection is decided
