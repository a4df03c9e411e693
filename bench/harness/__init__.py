"""The loopback benchmark's harness; ``bench/run.py`` is its command line, and the other
scripts in ``bench/`` use its parts.

Each module imports only the ones listed before it (no cycle):

* ``paths``: where the repository and ``bench/`` are;
* ``procs``: starting and stopping processes by PID, pinning with taskset, signals;
* ``sample``: RSS and CPU from /proc during a run, and whether the run was disturbed;
* ``load``: wrk and h2load runs, their parsing, warm-up, repeats and medians;
* ``nginx``, ``gateway``: the servers' configs and processes;
* ``certs``: the run's certificate and the TLS client context;
* ``probes``: single requests that check a server before it is measured;
* ``signin``: the OIDC provider and the sign-in for the authenticated route;
* ``idle``: memory per idle keep-alive connection;
* ``fmt``: formatting shared by the reports;
* ``sections``: ``http1``, ``tls``, ``http2``, each with what it runs and how it reports;
* ``suite``: the shared servers, the sections in order, and the whole report.
"""
