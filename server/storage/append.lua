-- Append one validated batch to its shard stream, at most once per batch id.
-- KEYS[1] = held stream  ldp:v1:{metric:shard}:held  (released to the fold by the shuffle stage: shuffle.py)
-- KEYS[2] = dedupe  ldp:v1:{metric:shard}:seen:<batch id hex>   (same hash tag, same slot)
-- ARGV    = day, version, n, batch bytes, dedupe expiry (ms, a UTC day boundary), start of the UTC day in ms,
--           content digest ('d2:' .. 16-byte MurmurHash3 of the batch bytes: append.py), breakdown cell ('' for none:
--           then the entry has no 'c' field, exactly as before breakdowns)
-- Returns the new entry id; false when the batch id was already seen with this content (a retry: nothing
-- written); 0 when it was seen with other content (a conflict: nothing written). A dedupe key whose value is
-- not a digest of this kind (from before digests, an earlier release's 'd1:' BLAKE2b, a released upload's '1')
-- cannot tell: a duplicate, as it always was.
--
-- Nothing finer than the day is stored with a batch:
-- * entry ids are "<start of a UTC day in ms>-<sequence>", never the arrival time. Ids must increase within a
--   stream, so when a later id exists already (another ingest whose clock is past midnight, or skew), the
--   entry takes the ms of the last id rounded up to a day boundary and the next sequence: still a day, never
--   Redis's clock ('*' alone would use it, and so would every later entry of that day on the shard);
-- * the dedupe key expires at a day boundary (PXAT), so neither its TTL nor the AOF tells the arrival time;
--   its value is the content digest: 19 bytes, a function of the privatized batch the stream entry holds.
--
-- Order: GET, XADD, SET. A script is not rolled back when a command fails, so the dedupe key is only
-- written after the entry exists: a failed XADD leaves nothing behind and the client's retry appends it.
local seen = redis.call('GET', KEYS[2])
if seen then
  if seen == ARGV[7] or string.sub(seen, 1, 3) ~= string.sub(ARGV[7], 1, 3) then
    return false
  end
  return 0
end
local function add(call, at)
  if ARGV[8] ~= nil and ARGV[8] ~= '' then
    return call('XADD', KEYS[1], at, 'd', ARGV[1], 'v', ARGV[2], 'n', ARGV[3], 'b', ARGV[4], 'c', ARGV[8])
  end
  return call('XADD', KEYS[1], at, 'd', ARGV[1], 'v', ARGV[2], 'n', ARGV[3], 'b', ARGV[4])
end
local id = add(redis.pcall, ARGV[6] .. '-*')
if type(id) == 'table' and id.err then
  -- Only an id below the stream's last takes this path; any other error (OOM, READONLY, MISCONF: Redis refuses
  -- writes) is returned as it is, nothing written (the stream may not even exist yet to be read).
  if not string.find(id.err, 'equal or smaller', 1, true) then
    return id
  end
  local info = redis.call('XINFO', 'STREAM', KEYS[1])
  local last = ''
  for i = 1, #info, 2 do
    if info[i] == 'last-generated-id' then last = info[i + 1] end
  end
  local ms = tonumber(string.match(last, '^(%d+)-'))
  local day = 86400000
  ms = math.ceil(ms / day) * day
  id = add(redis.call, string.format('%d-*', ms))
end
redis.call('SET', KEYS[2], ARGV[7], 'PXAT', ARGV[5])
return id
