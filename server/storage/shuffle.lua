-- Release one shuffled block: all or nothing (ldptel.storage.shuffle).
-- KEYS[1] = held stream     ldp:v1:{metric:shard}:held      (what ingest appends: one entry per upload)
-- KEYS[2] = released stream ldp:v1:{metric:shard}:reports   (what the fold reads)
-- KEYS[3] = release stats   ldp:v1:{metric:shard}:shuffle   (hash "<version>:<day>:<cell>:<stat>" -> integer)
-- KEYS[4..] = the dedupe keys of the uploads in the block (same hash tag, same slot)
-- ARGV[1] = k, ARGV[2..k+1] = the held entry ids the block consumes
-- then: start of the UTC day of the release in ms (the entry id carries only that day),
--       f = number of entry fields, then f field/value pairs (d, v, n, b[, c]),
--       the stats prefix "<version>:<day>:<cell>" ('' = no stats: a pass-through entry),
--       reports, uploads, distinct payloads, below n_min (0/1), n_min
-- Returns the released entry's id, or 0 when a held id is gone (another shuffler released it: nothing written).
--
-- Order: check, XADD, XDEL, dedupe values, stats. Redis replicates the script's effects as one MULTI/EXEC (the
-- AOF too), so a kill -9 of any process leaves either all of it or none of it.
local k = tonumber(ARGV[1])
for i = 2, k + 1 do
  if #redis.call('XRANGE', KEYS[1], ARGV[i], ARGV[i], 'COUNT', 1) == 0 then
    return 0
  end
end
local at = k + 2
local ms = ARGV[at]
local f = tonumber(ARGV[at + 1])
local fields = {}
for i = 1, 2 * f do
  fields[i] = ARGV[at + 1 + i]
end
at = at + 2 + 2 * f
-- Entry ids carry only a day (never Redis's clock): "<start of the day>-*", or, when a later id exists
-- (a block of an earlier day released after one of a later day), the last id's ms rounded up to a day boundary.
local id = redis.pcall('XADD', KEYS[2], ms .. '-*', unpack(fields))
if type(id) == 'table' and id.err then
  -- Only an id below the stream's last takes this path; any other error (OOM, READONLY, MISCONF: Redis refuses
  -- writes) is returned as it is, nothing written (the stream may not even exist yet to be read).
  if not string.find(id.err, 'equal or smaller', 1, true) then
    return id
  end
  local info = redis.call('XINFO', 'STREAM', KEYS[2])
  local last = ''
  for i = 1, #info, 2 do
    if info[i] == 'last-generated-id' then last = info[i + 1] end
  end
  local lms = tonumber(string.match(last, '^(%d+)-'))
  local day = 86400000
  lms = math.ceil(lms / day) * day
  id = redis.call('XADD', KEYS[2], string.format('%d-*', lms), unpack(fields))
end
local chunk = {}
for i = 2, k + 1 do
  chunk[#chunk + 1] = ARGV[i]
  if #chunk == 500 or i == k + 1 then
    redis.call('XDEL', KEYS[1], unpack(chunk))
    chunk = {}
  end
end
-- The content digest in a dedupe key could link a small upload's reports (hash every candidate subset of the
-- block): once released, a dedupe key only says "seen" (append.lua answers a duplicate for any other value).
for i = 4, #KEYS do
  redis.call('SET', KEYS[i], '1', 'XX', 'KEEPTTL')
end
local prefix = ARGV[at]
if prefix ~= '' then
  local reports = tonumber(ARGV[at + 1])
  local uploads = tonumber(ARGV[at + 2])
  local distinct = tonumber(ARGV[at + 3])
  local below = tonumber(ARGV[at + 4])
  local n_min = tonumber(ARGV[at + 5])
  redis.call('HINCRBY', KEYS[3], prefix .. ':reports', reports)
  redis.call('HINCRBY', KEYS[3], prefix .. ':blocks', 1)
  redis.call('HINCRBY', KEYS[3], prefix .. ':below', below)
  local names = {'min_reports', 'min_uploads', 'min_distinct', 'n_min'}
  local values = {reports, uploads, distinct, n_min}
  for i = 1, 4 do
    local old = tonumber(redis.call('HGET', KEYS[3], prefix .. ':' .. names[i]))
    if old == nil or values[i] < old then
      redis.call('HSET', KEYS[3], prefix .. ':' .. names[i], values[i])
    end
  end
end
return id
