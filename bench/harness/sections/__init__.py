"""The parts of a run, in the order ``suite.run_all`` runs them: ``http1`` (wrk, and the
idle connections), ``tls``, ``http2`` (h2load). Each has ``run_section``, which fills its
part of the results, and ``report``, which prints it."""
