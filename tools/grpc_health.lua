-- grpc.health.v1.Health at the edge, for load balancers and grpcurl: the empty service name is the whole stack
-- (SERVING when every upstream serves: what GET /health says), a service's full name is that service, answered by
-- the upstream that serves it. Check answers both; Watch follows one service (a stream the edge cannot aggregate).
--
-- A service's name is routed, not answered here: the script names the upstream in ROUTE_HEADER and clears the
-- route cache, so the call (Check or Watch) reaches that upstream's own health service. The empty name asks every
-- upstream (check(), as GET /health does), then forwards the Check to one that answered and writes the stack's
-- status over its answer: Envoy's own reply to a gRPC call is trailers-only, so the answer's message has to come
-- from an upstream. A caller's own ROUTE_HEADER is removed first: only this script picks the upstream.
--
-- UPSTREAMS and TIMEOUT_MS are prepended by envoy_config.py, then health_checks.lua (check, varint).

local ROUTE_HEADER = "x-thermostat-health-upstream"
local METADATA = "thermostat.grpc_health"
local STATUS = { SERVING = 1, NOT_SERVING = 2 }
local GRPC = { INVALID_ARGUMENT = "3", NOT_FOUND = "5", UNIMPLEMENTED = "12", UNAVAILABLE = "14" }

-- The service name of the HealthCheckRequest in a unary gRPC frame ("" when unset), or nil when unreadable.
local function requested_service(frame)
  if #frame < 5 or frame:byte(1) ~= 0 then
    return nil -- no frame, or a compressed one
  end
  local name, i = "", 6
  while i <= #frame do
    local key
    key, i = varint(frame, i)
    if key == nil then
      return nil
    end
    local wire = key % 8
    if wire == 0 then
      local _
      _, i = varint(frame, i)
    elseif wire == 2 then
      local n
      n, i = varint(frame, i)
      if n == nil or i + n - 1 > #frame then
        return nil
      end
      if math.floor(key / 8) == 1 then
        name = frame:sub(i, i + n - 1)
      end
      i = i + n
    else
      return nil
    end
  end
  return name
end

local function owner_of(name)
  for _, upstream in ipairs(UPSTREAMS) do
    if upstream.health_service == name then
      return upstream
    end
    for _, service in ipairs(upstream.services) do
      if service == name then
        return upstream
      end
    end
  end
  return nil
end

local function known_names()
  local names = {}
  for _, upstream in ipairs(UPSTREAMS) do
    for _, service in ipairs(upstream.services) do
      names[#names + 1] = service
    end
  end
  return table.concat(names, ", ")
end

-- grpc-message is percent-encoded (the gRPC spec): anything outside printable ASCII, and % itself.
local function percent_encode(s)
  return (s:gsub("[^\32-\36\38-\126]", function(c) return string.format("%%%02X", c:byte()) end))
end

-- Envoy's reply to a gRPC call: trailers-only (headers and no body), the status given, `message` as grpc-message.
local function refuse(handle, code, message)
  handle:respond({
    [":status"] = "200",
    ["content-type"] = "application/grpc",
    ["grpc-status"] = code,
    ["grpc-message"] = percent_encode(message),
  }, "")
end

local function route_to(handle, upstream)
  handle:headers():replace(ROUTE_HEADER, upstream.cluster)
  handle:clearRouteCache()
end

function envoy_on_request(handle)
  handle:headers():remove(ROUTE_HEADER)
  local watch = handle:headers():get(":path") == "/grpc.health.v1.Health/Watch"
  local body = handle:body()
  local frame = ""
  if body ~= nil then
    frame = body:getBytes(0, body:length())
  end
  local name = requested_service(frame)
  if name == nil then
    refuse(handle, GRPC.INVALID_ARGUMENT, "the edge reads one uncompressed grpc.health.v1.HealthCheckRequest")
    return
  end
  if name ~= "" then
    local owner = owner_of(name)
    if owner == nil then
      refuse(handle, GRPC.NOT_FOUND, "the edge serves no " .. name .. ": ask for the empty name (the whole stack)"
        .. " or one of " .. known_names())
      return
    end
    route_to(handle, owner)
    return
  end
  if watch then
    refuse(handle, GRPC.UNIMPLEMENTED, "Watch at the edge follows one service: name it (one of "
      .. known_names() .. "); the whole stack (the empty name) answers Check, as GET /health does")
    return
  end
  local all, answering, down = true, nil, {}
  for _, upstream in ipairs(UPSTREAMS) do
    local serving, status, reached = check(handle, upstream)
    all = all and serving
    if not serving then
      down[#down + 1] = upstream.cluster .. " " .. status
    end
    if reached and answering == nil then
      answering = upstream
    end
  end
  if answering == nil then
    refuse(handle, GRPC.UNAVAILABLE, "no service behind the edge answers its health check: " .. table.concat(down, ", "))
    return
  end
  handle:streamInfo():dynamicMetadata():set(METADATA, "status", all and STATUS.SERVING or STATUS.NOT_SERVING)
  route_to(handle, answering)
end

-- The empty name's answer: the stack's status over the upstream's own HealthCheckResponse.
function envoy_on_response(handle)
  local stack = handle:streamInfo():dynamicMetadata():get(METADATA)
  if stack == nil or stack.status == nil then
    return
  end
  local body = handle:body()
  if body == nil or body:length() == 0 then
    return -- the upstream failed the call: its status stands
  end
  body:setBytes(string.char(0, 0, 0, 0, 2, 8, math.floor(stack.status)))
end
