-- The health checks GET /health and the edge's grpc.health.v1.Health share: `check(handle, upstream)` asks an
-- upstream's gRPC health service for its health_service and answers (serving, status word, reached): reached is
-- true when the upstream answered the call at all (SERVING or not). Prepended to both scripts by envoy_config.py,
-- after UPSTREAMS and TIMEOUT_MS.

local SERVING = string.char(8, 1) -- HealthCheckResponse{status: SERVING}
-- Envoy answers a gRPC call it could not deliver with HTTP 200 and a gRPC status (14 when nothing listens).
local GRPC_FAILURES = {
  ["4"] = "timed out (DEADLINE_EXCEEDED)",
  ["5"] = "SERVICE_UNKNOWN (NOT_FOUND)",
  ["12"] = "no health service (status 12: the upstream serves no grpc.health.v1)",
  ["14"] = "unreachable (UNAVAILABLE)",
}

-- A unary gRPC frame holding HealthCheckRequest{service = name}.
local function check_request(service)
  local message = ""
  if #service > 0 then
    message = string.char(10, #service) .. service -- field 1, length-delimited (names are < 128 bytes)
  end
  local n = #message
  return string.char(0, 0, 0, math.floor(n / 256) % 256, n % 256) .. message
end

local function check(handle, upstream)
  local ok, headers, body = pcall(handle.httpCall, handle, upstream.cluster, {
    [":method"] = "POST",
    [":path"] = "/grpc.health.v1.Health/Check",
    [":authority"] = upstream.cluster,
    ["content-type"] = "application/grpc",
    ["te"] = "trailers",
  }, check_request(upstream.health_service), TIMEOUT_MS)
  if not ok then
    return false, "unreachable", false
  end
  local status = headers[":status"]
  if status ~= "200" then
    return false, "unreachable (HTTP " .. tostring(status) .. ")", false
  end
  local grpc_status = headers["grpc-status"]
  if grpc_status ~= nil and grpc_status ~= "0" then
    return false, GRPC_FAILURES[grpc_status] or ("health check failed (gRPC status " .. grpc_status .. ")"), false
  end
  if body ~= nil and body:sub(6, 7) == SERVING then
    return true, "SERVING", true
  end
  if body ~= nil and #body >= 7 and body:byte(6) == 8 then
    local names = { [0] = "UNKNOWN", [2] = "NOT_SERVING", [3] = "SERVICE_UNKNOWN" }
    return false, names[body:byte(7)] or "NOT_SERVING", true
  end
  if body ~= nil and #body == 5 then
    return false, "UNKNOWN", true
  end
  return false, "unreadable health answer", true
end

-- A varint at position i of s: its value and the position after it.
local function varint(s, i)
  local value, scale = 0, 1
  while i <= #s do
    local b = s:byte(i)
    value = value + (b % 128) * scale
    i = i + 1
    if b < 128 then
      return value, i
    end
    scale = scale * 128
  end
  return nil, i
end

