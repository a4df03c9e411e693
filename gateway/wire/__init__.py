"""The wire layer: what the gateway knows of HTTP as plain functions over bytes and
strings, with no I/O and no Twisted (a layering test holds it to that). Everything above
(pages, authorization, the data plane) may use it; it imports nothing of the gateway's.
"""
