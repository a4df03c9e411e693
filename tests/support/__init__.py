"""Shared test support code: real peer processes on loopback, readiness checks."""
