-- REST responses at the edge: HTTP statuses gRPC lacks, problem+json errors, no gRPC plumbing headers.
--
-- Listed before grpc_json_transcoder, so on the response path it sees what the transcoder produced.
-- Native gRPC calls (content-type application/grpc*) go through the same listener and are left exactly
-- as they are: a gRPC client receiving HTTP 202 fails with "unexpected HTTP status code". The edge's
-- config skips this filter for them on the request's content-type; the check below is a second guard.
-- A plain success (200 without x-http-code, title or nulls) returns after four header reads: this runs on
-- every REST response, so its common case is kept short. The gRPC plumbing headers (grpc-*) are removed by
-- the filter the config lists before this one, which runs after it on the response path. The body is read
-- only when a null is to be written or an error becomes problem+json.

local REASONS = {
  [200] = "OK", [201] = "Created", [202] = "Accepted", [204] = "No Content",
  [400] = "Bad Request", [401] = "Unauthorized", [403] = "Forbidden", [404] = "Not Found",
  [405] = "Method Not Allowed", [408] = "Request Timeout", [409] = "Conflict", [410] = "Gone",
  [412] = "Precondition Failed", [413] = "Content Too Large", [415] = "Unsupported Media Type",
  [422] = "Unprocessable Content", [429] = "Too Many Requests", [431] = "Request Header Fields Too Large",
  [499] = "Client Closed Request", [500] = "Internal Server Error", [501] = "Not Implemented",
  [502] = "Bad Gateway", [503] = "Service Unavailable", [504] = "Gateway Timeout",
}

local function json_escape(s)
  return (s:gsub('[%c"\\]', function(c)
    if c == '"' then return '\\"' end
    if c == "\\" then return "\\\\" end
    if c == "\n" then return "\\n" end
    if c == "\r" then return "\\r" end
    if c == "\t" then return "\\t" end
    return string.format("\\u%04x", c:byte())
  end))
end

-- The byte ranges a well-formed UTF-8 sequence's second byte may take after each lead byte (RFC 3629: no
-- overlong forms, no surrogates, nothing past U+10FFFF); any other continuation byte is 0x80-0xBF.
local SECOND = {[0xE0] = {0xA0, 0xBF}, [0xED] = {0x80, 0x9F}, [0xF0] = {0x90, 0xBF}, [0xF4] = {0x80, 0x8F}}

local function sequence_length(s, i)
  local c = s:byte(i)
  local len = (c < 0x80 and 1) or (c >= 0xC2 and c <= 0xDF and 2) or (c >= 0xE0 and c <= 0xEF and 3)
    or (c >= 0xF0 and c <= 0xF4 and 4) or 0
  if len == 0 or i + len - 1 > #s then return 0 end
  for k = i + 1, i + len - 1 do
    local low, high = 0x80, 0xBF
    if k == i + 1 and SECOND[c] ~= nil then low, high = SECOND[c][1], SECOND[c][2] end
    local b = s:byte(k)
    if b < low or b > high then return 0 end
  end
  return len
end

-- A JSON string body with every byte that is not part of well-formed UTF-8 replaced by \ufffd: the
-- transcoder quotes a client's non-UTF-8 body in its error ("Encountered non UTF-8 code points"), and the
-- problem must still be JSON a client can decode (the chaos suite's fuzzing found a 400 that was not).
local function utf8_only(s)
  if not s:find("[\128-\255]") then return s end
  local out, i = {}, 1
  while i <= #s do
    local len = sequence_length(s, i)
    if len > 0 then
      out[#out + 1] = s:sub(i, i + len - 1)
      i = i + len
    else
      out[#out + 1] = "\\ufffd"
      i = i + 1
    end
  end
  return table.concat(out)
end

local function percent_decode(s)
  return (s:gsub("%%(%x%x)", function(hex) return string.char(tonumber(hex, 16)) end))
end

-- The transcoder's error body is google.rpc.Status as JSON: {"code":5,"message":"...","details":[]}.
-- The message's value is already a valid JSON string body, so it is copied without decoding.
local function status_message(body)
  local first = body:find('"message":"', 1, true)
  if first == nil then return nil end
  local i = first + 11
  local j = i
  while j <= #body do
    local c = body:sub(j, j)
    if c == "\\" then
      j = j + 2
    elseif c == '"' then
      return body:sub(i, j - 1)
    else
      j = j + 1
    end
  end
  return nil
end

-- The transcoder prints no unset message or optional field, and an empty plain string as "", where the
-- pod-control seed's clients read `null` ("isRunning: true, readySince: null" means waking; podId null: no pod named).
-- A service names such top-level fields in the x-json-nulls header (JSON names, comma-separated): a printed
-- "" is replaced by null, an absent field is added as null. The printer writes fields in field-number
-- order and a nested message comes after the scalars a service names, so the first `"name":""` is the
-- top-level one; inside a JSON string a quote is escaped, so no string value can match it.
local function write_nulls(handle, names)
  local body = handle:body()
  if body == nil then
    return
  end
  local text = body:getBytes(0, body:length())
  local added = {}
  for name in names:gmatch("[%w_]+") do
    local empty = '"' .. name .. '":""'
    local at = text:find(empty, 1, true)
    if at ~= nil then
      text = text:sub(1, at - 1) .. '"' .. name .. '":null' .. text:sub(at + #empty)
    else
      added[#added + 1] = '"' .. name .. '":null'
    end
  end
  if #added > 0 then
    local first = text:find("{", 1, true)
    if first == nil then
      return
    end
    local rest = text:sub(first + 1)
    local separator = ","
    if rest:match("^%s*}") then
      separator = ""
    end
    text = text:sub(1, first) .. table.concat(added, ",") .. separator .. rest
  end
  body:setBytes(text)
  handle:headers():replace("content-length", tostring(#text))
end

-- What the transcoder says of a request it refuses, in the words of the rest of the API: the field first, then
-- what is wrong with it (`page_size: must be a whole number (32-bit), got "abc"`), never its type names
-- (TYPE_INT32) nor the request message's (thermostat.pool.v1.SubmitJobJsonRequest). `detail` is JSON-escaped.
local KINDS = {
  TYPE_INT32 = "a whole number (32-bit)", TYPE_SINT32 = "a whole number (32-bit)",
  TYPE_SFIXED32 = "a whole number (32-bit)", TYPE_INT64 = "a whole number (64-bit)",
  TYPE_SINT64 = "a whole number (64-bit)", TYPE_SFIXED64 = "a whole number (64-bit)",
  TYPE_UINT32 = "a non-negative whole number (32-bit)", TYPE_FIXED32 = "a non-negative whole number (32-bit)",
  TYPE_UINT64 = "a non-negative whole number (64-bit)", TYPE_FIXED64 = "a non-negative whole number (64-bit)",
  TYPE_DOUBLE = "a finite number", TYPE_FLOAT = "a finite number", TYPE_BOOL = "true or false",
  TYPE_ENUM = "one of the enum's names", TYPE_BYTES = "base64",
}

local function in_our_words(detail)
  local field = detail:match('^Could not find field \\"(.-)\\" in the type \\"[%w_.]+\\"%.?$')
  if field ~= nil then
    return field .. ": no such query parameter on this route"
  end
  local name, value, kind = detail:match('^([%w_.]+): invalid value \\"(.-)\\" for type (TYPE_%u+%d*)$')
  if name ~= nil then
    return name .. ": must be " .. (KINDS[kind] or "another kind of value") .. ', got \\"' .. value .. '\\"'
  end
  local bound, field_name = detail:match('^The binding value (\\".-\\") of the field ([%w_.]+) is conflicting')
  if bound ~= nil then
    return "body." .. field_name .. ": conflicts with the path's " .. field_name .. " " .. bound
      .. "; leave it out of the body"
  end
  local path = detail:match("^Could not resolve (.-) to a method%.?$")
  if path ~= nil then
    return path .. ": no route takes this method on this path"
  end
  if detail:match("^Unexpected ") or detail:match("^Expected ") or detail:match("^Invalid ") then
    return "body: not the JSON this route reads (this route may take no body)"
  end
  return detail
end

function envoy_on_response(handle)
  local headers = handle:headers()
  local code = headers:get("x-http-code")
  local nulls = headers:get("x-json-nulls")
  local title = headers:get("x-problem-title")
  if code == nil and nulls == nil and title == nil and headers:get(":status") == "200" then
    return
  end
  local content_type = headers:get("content-type") or ""
  if content_type:sub(1, 16) == "application/grpc" then
    return
  end

  local grpc_message = headers:get("grpc-message")
  headers:remove("x-http-code")
  headers:remove("x-problem-title")
  headers:remove("x-json-nulls")

  -- Every successful RPC leaves the transcoder as 200, so any other status is an error: a failed RPC
  -- (the transcoder's google.rpc.Status JSON) or a reply Envoy made itself (text/plain). A success
  -- that names a 4xx/5xx through x-http-code keeps its own body.
  local original = tonumber(headers:get(":status")) or 500
  if code ~= nil and code:match("^[1-5]%d%d$") then
    headers:replace(":status", code)
  end
  if original < 400 or content_type:sub(1, 24) == "application/problem+json" then
    if nulls ~= nil and original < 400 and content_type:sub(1, 16) == "application/json" then
      write_nulls(handle, nulls)
    end
    return
  end

  local status = tonumber(headers:get(":status")) or original
  -- A reply without a body (any HEAD) stays as it is: Lua cannot add a body to it.
  local body = handle:body()
  if body == nil then
    return
  end
  local text = body:getBytes(0, body:length())
  local detail = nil
  if content_type:sub(1, 16) == "application/json" then
    detail = status_message(text)
  end
  if detail == nil and grpc_message ~= nil then
    detail = json_escape(percent_decode(grpc_message))
  end
  if detail == nil then
    detail = json_escape((text:gsub("%s+$", "")))
  end
  if content_type:sub(1, 16) ~= "application/json" and (status == 400 or status == 404) then
    detail = in_our_words(detail) -- Envoy's own reply (a service's error is the transcoder's JSON Status)
  end
  if status == 400 and detail:sub(1, 2) == ": " then
    -- the transcoder's error at the request body's root (a list or a scalar where the message's object belongs)
    -- comes with an empty field path: the field at fault is the body itself
    detail = "body" .. detail
  end
  local problem = string.format('{"type":"about:blank","status":%d,"title":"%s","detail":"%s"}',
    status, utf8_only(json_escape(title or REASONS[status] or "Error")), utf8_only(detail))
  body:setBytes(problem)
  -- body() yields until the whole response is buffered; the header handle taken before is then stale.
  headers = handle:headers()
  headers:replace("content-type", "application/problem+json")
  headers:replace("content-length", tostring(#problem))
end
