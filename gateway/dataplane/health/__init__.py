"""Active health checks of upstream hosts (http, tcp, grpc) and the manager that runs them
per plan.
"""
