"""Routes compiled per configuration snapshot (the plan), host and path matching, redirect
routes.
"""
