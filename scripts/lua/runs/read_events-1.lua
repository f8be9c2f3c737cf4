-- read_events: an API's event feed reads a run's new events, and how many were trimmed unread.
--
-- KEYS[1]  events       stream  the run's events
-- ARGV[1]  after        stream id, exclusive: the last entry the feed has read
-- ARGV[2]  added        integer the stream's entries-added count when `after` was written
-- ARGV[3]  max_entries  integer most entries returned
-- returns  {code, missing, entries}  codes: OK. missing: entries written after `after` and
--          trimmed by the stream's cap before they were read, -1 when some may have been
--          but Redis (before 7.0) does not count them; entries: up to `count` stream
--          entries after `after`, oldest first, in the shape of a range read
-- events   none: this script only reads
-- invariant: a reader that fell further behind than the stream's cap learns it (missing > 0)
--          from the same atomic step that returns the entries, so it can say so instead of
--          skipping past the gap in silence. Trimming removes the oldest entries only, so
--          when the oldest retained entry is newer than `after`, every retained entry came
--          after it, and whatever else was written after it is gone.
-- validate-then-write: it writes nothing, so an error can leave nothing half-made.

local entries = redis.call('XRANGE', KEYS[1], '(' .. ARGV[@after], '+', 'COUNT', ARGV[@max_entries])
if #entries == 0 then
  return {'OK', 0, entries}
end
local info = redis.call('XINFO', 'STREAM', KEYS[1])
local length, added_now, first_id
for i = 1, #info, 2 do
  local field = info[i]
  if field == 'length' then
    length = info[i + 1]
  elseif field == 'entries-added' then
    added_now = info[i + 1]
  elseif field == 'first-entry' then
    first_id = info[i + 1][1]
  end
end
local missing = 0
if first_id == entries[1][1] then
  if added_now == nil then
    missing = -1
  elseif added_now - tonumber(ARGV[@added]) > length then
    missing = added_now - tonumber(ARGV[@added]) - length
  end
end
return {'OK', missing, entries}
