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
-- TIMEOUT_MS are prepended by envoy_config.py from the edge's upstreams, then health_checks.lua (check, varint).

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
