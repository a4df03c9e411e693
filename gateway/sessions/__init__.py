"""Sessions: the server-side record of a sign-in and the cookie that names it."""
