"""The Envoy edge: one listener for native gRPC and transcoded REST in front of every service.

What a service behind the edge does to shape its REST answer (native gRPC callers never see any of it):
- HTTP status gRPC lacks (202 Waiting, 409 Failed, 502 worker failed): send initial metadata
  `x-http-code: <status>` (`await context.send_initial_metadata((("x-http-code", "202"),))`) before
  returning or aborting. Trailing metadata does not reach REST responses.
- Errors: abort with a gRPC status; the REST answer is application/problem+json
  {"type", "status", "title", "detail"}, detail = the gRPC message, status = x-http-code if sent, else the
  gRPC→HTTP mapping (NOT_FOUND 404, FAILED_PRECONDITION 400, ABORTED 409, UNAVAILABLE 503, …), title = the
  status's reason phrase unless initial metadata `x-problem-title` names one.
- Raw bodies: google.api.HttpBody in and out. A top-level JSON array response: response_body must name a
  google.api.HttpBody field (Envoy refuses response_body on any other field), filled with the JSON text.
"""
