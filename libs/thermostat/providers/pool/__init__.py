"""The pool's outbound adapters: the Backend protocol, the local-process backend and the worker HTTP client."""
