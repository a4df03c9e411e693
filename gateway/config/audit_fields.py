"""The fields an authorization audit event may have (``authorize_log_fields`` chooses
among them; ``gateway.observability.audit`` describes each), in the order written."""

from __future__ import annotations

AUDIT_FIELDS = ("time", "request_id", "trace_id", "route", "from", "user_id", "email",
                "provider", "client", "method", "host", "path", "via", "credential",
                "decision", "status", "reasons", "rule", "ssh_user", "client_id",
                "mcp_method", "mcp_name", "mcp_id", "arguments_sha256")
