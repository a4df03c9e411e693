"""Authorization: pure policy decisions and the signed identity passed upstream."""
