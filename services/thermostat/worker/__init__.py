"""The reference worker: the pool's worker contract in one small process (httptools, uvloop when importable).

worker-pool seed: The worker contract.

    GET  /health                          200 without auth; names the handler, reveals nothing secret
    POST /execute                         Authorization: Bearer $STRATA_WORKER_TOKEN (401 otherwise);
                                          the body is the job payload; 200 with the handler's result bytes
    POST /v1/executions/{build_id}/cancel same token; cancels the running execution of that build (200),
                                          404 when none runs; the cancelled execute answers 409

The pool's payload is opaque to the pool, so the worker learns a running job's build id the way
strata-worker does, from the payload itself: a payload that is a JSON object with a string `build_id`
registers its execution under that id. Any other payload runs too but cannot be cancelled by build id.

It imports nothing from the other services or libraries of this repository, so it can run in any image
that has Python and httptools (uvloop optional). Layout: config.py reads the environment, handlers.py the
handlers, app.py the routes (requests in, answers out), server.py the HTTP/1.1 server, __main__.py the process.
"""
