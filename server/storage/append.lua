-- Append one validated batch to its shard stream, at most once per batch id.
-- KEYS[1] = stream  ldp:v1:{metric:shard}:reports
-- KEYS[2] = dedupe  ldp:v1:{metric:shard}:seen:<batch id hex>   (same hash tag, same slot)
-- ARGV    = day, version, n, batch bytes, dedupe ttl seconds, start of the UTC day in ms
-- Returns the new entry id, or false when the batch id was already seen (a retry: nothing written).
--
-- Entry ids are "<start of the UTC day in ms>-<sequence>", never the arrival time: nothing finer than the
-- day is stored with a batch. Ids still increase within a stream (the aggregator's checkpoint relies on it).
-- If a later id already exists (an entry from before this format, or another ingest whose clock is past
-- midnight already), '*' is used: Redis then keeps the last id's ms and increments the sequence.
--
-- Order: EXISTS, XADD, SET. A script is not rolled back when a command fails, so the dedupe key is only
-- written after the entry exists: a failed XADD leaves nothing behind and the client's retry appends it.
if redis.call('EXISTS', KEYS[2]) == 1 then
  return false
end
local id = redis.pcall('XADD', KEYS[1], ARGV[6] .. '-*', 'd', ARGV[1], 'v', ARGV[2], 'n', ARGV[3], 'b', ARGV[4])
if type(id) == 'table' and id.err then
  id = redis.call('XADD', KEYS[1], '*', 'd', ARGV[1], 'v', ARGV[2], 'n', ARGV[3], 'b', ARGV[4])
end
redis.call('SET', KEYS[2], id, 'EX', ARGV[5])
return id
