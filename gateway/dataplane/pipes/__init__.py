"""Byte pipes between a client and an upstream: websocket/SPDY upgrades (and CONNECT
tunnels).
"""
