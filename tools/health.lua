-- GET /health: asks each upstream's gRPC health service (grpc.health.v1.Health/Check) and answers 200 when
-- every one serves, else 503, with a JSON body naming each upstream and whether it serves, so an operator
-- sees at once which one is down (a load balancer still reads only the status code).
--
-- An upstream with a `detail` call (the registry's health_detail, e.g. the pool's machine types and machine
-- counts) is asked that too: its google.api.HttpBody answer holds a JSON object, shown as the entry's "detail"
-- (null when it does not answer). It never changes the status: serving is the health service's word.
--
-- An upstream with a `top` (the registry's health_top_fallback, the pool's) also has its detail's members printed
-- at the top level, beside "status" and "upstreams" (the `top` object's members when the detail does not answer):
-- the worker-pool seed's clients read the original strata-pool package's /health, {"status": "ok", "workers":
-- {...}, "machine_types": [...]}. So "status" is "ok" when every upstream serves ("unavailable" when not), and the
-- word every upstream's health service gave overall ("SERVING" / "NOT_SERVING") is "serving".
--
-- Enabled on the /health route only (per-route Lua), so no other request runs this script. UPSTREAMS and
-- TIMEOUT_MS are prepended by envoy_config.py from the edge's upstreams.

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
    return false, "unreachable"
  end
  local status = headers[":status"]
  if status ~= "200" then
    return false, "unreachable (HTTP " .. tostring(status) .. ")"
  end
  local grpc_status = headers["grpc-status"]
  if grpc_status ~= nil and grpc_status ~= "0" then
    return false, GRPC_FAILURES[grpc_status] or ("health check failed (gRPC status " .. grpc_status .. ")")
  end
  if body ~= nil and body:sub(6, 7) == SERVING then
    return true, "SERVING"
  end
  if body ~= nil and #body >= 7 and body:byte(6) == 8 then
    local names = { [0] = "UNKNOWN", [2] = "NOT_SERVING", [3] = "SERVICE_UNKNOWN" }
    return false, names[body:byte(7)] or "NOT_SERVING"
  end
  if body ~= nil and #body == 5 then
    return false, "UNKNOWN"
  end
  return false, "unreadable health answer"
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

-- The data field (2) of the google.api.HttpBody in a unary gRPC answer, or nil.
local function http_body_data(body)
  if body == nil or #body < 5 then
    return nil
  end
  local i = 6
  while i <= #body do
    local key
    key, i = varint(body, i)
    if key == nil then
      return nil
    end
    local wire = key % 8
    if wire == 0 then
      local _
      _, i = varint(body, i)
    elseif wire == 2 then
      local n
      n, i = varint(body, i)
      if n == nil then
        return nil
      end
      if math.floor(key / 8) == 2 then
        return body:sub(i, i + n - 1)
      end
      i = i + n
    else
      return nil
    end
  end
  return nil
end

local function detail(handle, upstream)
  local ok, headers, body = pcall(handle.httpCall, handle, upstream.cluster, {
    [":method"] = "POST",
    [":path"] = upstream.detail,
    [":authority"] = upstream.cluster,
    ["content-type"] = "application/grpc",
    ["te"] = "trailers",
  }, string.char(0, 0, 0, 0, 0), TIMEOUT_MS)
  if not ok or headers[":status"] ~= "200" or (headers["grpc-status"] or "0") ~= "0" then
    return "null"
  end
  local data = http_body_data(body)
  if data == nil or data:sub(1, 1) ~= "{" then
    return "null"
  end
  return data
end

function envoy_on_request(handle)
  local all = true
  local entries = {}
  local tops = {}
  for _, upstream in ipairs(UPSTREAMS) do
    local serving, status = check(handle, upstream)
    all = all and serving
    local services = {}
    for i, name in ipairs(upstream.services) do
      services[i] = '"' .. name .. '"'
    end
    local extra = ""
    if upstream.detail ~= nil then
      local shown = detail(handle, upstream)
      extra = ',"detail":' .. shown
      if upstream.top ~= nil then
        local members = shown
        if members == "null" then
          members = upstream.top
        end
        members = members:match("^%s*{(.*)}%s*$") or ""
        if members:match("%S") then
          tops[#tops + 1] = members
        end
      end
    end
    entries[#entries + 1] = string.format('{"name":"%s","services":[%s],"serving":%s,"status":"%s"%s}',
      upstream.cluster, table.concat(services, ","), tostring(serving), status, extra)
  end
  local top = ""
  if #tops > 0 then
    top = "," .. table.concat(tops, ",")
  end
  local body = string.format('{"status":"%s","serving":"%s"%s,"upstreams":[%s]}', all and "ok" or "unavailable",
    all and "SERVING" or "NOT_SERVING", top, table.concat(entries, ","))
  handle:respond({
    [":status"] = all and "200" or "503",
    ["content-type"] = "application/json",
    ["cache-control"] = "no-store",
  }, body)
end
