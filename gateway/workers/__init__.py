"""``workers``: the data plane in several processes, supervised by the twistd process.

The supervisor (``supervisor``) binds the listeners, starts one worker process
(``child``) per CPU or as configured, hands each its sockets, restarts one that dies,
tells them all to reload with the snapshot it validated, asks them for their metrics
when scraped (``merge``) and stops them on SIGTERM. They talk over a pipe pair
(``control``); a worker whose supervisor is gone stops by itself.
"""
