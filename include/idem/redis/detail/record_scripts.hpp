#pragma once
// The Lua scripts of idem::redis: each operation on a record is one script, atomic on the
// server, its `now` read inside it from the server's clock (TIME). Decisions are taken in
// C++ by idem/backend/record_rules.hpp; a script only re-checks, on the record as it is now,
// the rule under which its write may happen, and each such check is named after that rule.
// Every script touches one record and its bucket's indexes and layout key (detail/layout.hpp),
// all in one hash slot, and every key it touches is declared in KEYS. A record is read with
// load() and written with save() (the prelude), whichever of the two encodings it has.

#include <cstddef>
#include <string>

#include <fmt/format.h>

#include "idem/redis/detail/layout.hpp"
#include "idem/redis/detail/script.hpp"
#include "idem/status.hpp"

namespace idem::redis::detail {

struct RecordScripts {
  Script claim;       // insert a fresh claim, or answer with the record there
  Script take_over;   // rewrite a record read earlier, guarded by takeover_holds
  Script finish;      // complete or fail, guarded by holds
  Script read;        // the record and the server's now
  Script due;         // members of an index whose score has come
  Script release;     // release one stale claim, guarded by is_stale
  Script purge;       // delete one expired record, guarded by is_expired
  Script repair;      // write a repaired record read earlier, guarded by the ticket read
  Script points;      // write a claim's recovery points, guarded by holds and the points read
  Script range;       // a page of an index in score order, up to a score
  Script scan;        // a page of an index by ZSCAN
  Script sized_read;  // read, and the memory the record takes (stats)
  Script sizes;       // the memory some keys of one slot take (stats)
  Script get;         // a string key's value (a bucket's layout stamp)
  Script stamp;       // stamp a bucket's layout key unless it has a stamp
};

namespace script_text {

// The prelude of every script: the server's clock in milliseconds, integers written as
// integers (Lua numbers are doubles, and would otherwise be written as 1.7e+12), the record's
// fields in record_fields' order, the status names, and the record's two encodings (layout.hpp).
inline std::string prelude() {
  std::string fields;
  for (std::size_t i = 0; i < record_fields.size(); ++i) {
    fields += fmt::format("{}'{}'", i == 0 ? "" : ", ", record_fields[i]);
  }
  return fmt::format(R"(local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function int(n) return string.format('%d', n) end
local FIELDS = {{{}}}
local PROCESSING, FAILED, UNKNOWN = '{}', '{}', '{}'
-- record_rules: is_expired (an outcome_unknown record never expires)
local function is_expired(status, expire_at, now)
  return tonumber(expire_at) <= now and status ~= UNKNOWN
end
-- A record is a table of field = value (a field it lacks is nil): a string as load() answers
-- it, or for a count or time a Lua number where a script set one. Stored, it is a
-- string packed by cmsgpack (an array in FIELDS' order, counts and times as integers, a missing
-- field as ''), or a hash of FIELDS whose empty optional fields are left out.
local OPTIONAL = {{recovery_points = true, repair_reason = true, repaired_at = true}}
local NUMBER = {{fence = true, retryable = true, attempts = true, created_at = true,
  updated_at = true, lease_until = true, expire_at = true, repaired_at = true}}
-- The record at key, or nil; and whether it is packed. A packed value that does not unpack
-- answers a record without fields (which the caller reports as corrupt, and no guard holds).
local function load(key)
  local v = redis.pcall('GET', key)
  if not v then return nil, false end
  if type(v) == 'table' then
    local h = redis.call('HMGET', key, unpack(FIELDS))
    local rec = {{}}
    for i, f in ipairs(FIELDS) do
      if h[i] then rec[f] = h[i] end
    end
    return rec, false
  end
  local ok, values = pcall(cmsgpack.unpack, v)
  local rec = {{}}
  if not ok or type(values) ~= 'table' then return rec, true end
  for i, f in ipairs(FIELDS) do
    local x = values[i]
    if type(x) == 'number' then x = int(x) end
    if type(x) == 'string' then rec[f] = x end
  end
  return rec, true
end
-- The record's values in FIELDS' order, a missing one as false (a nil reply).
local function fields(rec)
  local out = {{}}
  for i, f in ipairs(FIELDS) do out[i] = rec[f] or false end
  return out
end
-- Writes the record at key (a count or time may be a Lua number or its decimal string). Packed
-- once the bucket's layout key is stamped or when the record already was; else a hash, the only
-- encoding an idem before layout 2 reads. The key keeps its time to live, or with until_ms expires
-- then: set by the write itself, a call less than a PEXPIREAT after it.
local function save(key, layout, rec, packed, until_ms)
  if packed or redis.call('EXISTS', layout) == 1 then
    local values = {{}}
    for i, f in ipairs(FIELDS) do
      local x = rec[f] or ''
      if NUMBER[f] and type(x) == 'string' and x ~= '' then x = tonumber(x) or x end
      values[i] = x
    end
    if until_ms then
      redis.call('SET', key, cmsgpack.pack(values), 'PXAT', int(until_ms))
    else
      redis.call('SET', key, cmsgpack.pack(values), 'KEEPTTL')
    end
    return
  end
  local set, del = {{}}, {{}}
  for _, f in ipairs(FIELDS) do
    local x = rec[f]
    if OPTIONAL[f] and (x == nil or x == '') then
      del[#del + 1] = f
    elseif x ~= nil then
      set[#set + 1] = f
      set[#set + 1] = type(x) == 'number' and int(x) or x
    end
  end
  redis.call('HSET', key, unpack(set))
  if #del > 0 then redis.call('HDEL', key, unpack(del)) end
  if until_ms then redis.call('PEXPIREAT', key, int(until_ms)) end
end
-- The expiry of a record that is (or is no longer) outcome_unknown: an unknown record has no
-- time to live and leaves the expiry index; any other gets expire_at + keep back.
local function set_expiry(key, expiry, unknown, member, status, expire_at, updated_at, keep)
  if status == UNKNOWN then
    redis.call('PERSIST', key)
    redis.call('ZREM', expiry, member)
    redis.call('ZADD', unknown, updated_at, member)
  else
    redis.call('PEXPIREAT', key, int(tonumber(expire_at) + tonumber(keep)))
    redis.call('ZADD', expiry, expire_at, member)
    redis.call('ZREM', unknown, member)
  end
end
)",
                     fields, to_string(Status::processing), to_string(Status::failed),
                     to_string(Status::outcome_unknown));
}

// The writing scripts take the record's keys (RecordKeys) in one order: KEYS[1] the record,
// KEYS[2] leases, KEYS[3] expiry, KEYS[4] unknown, KEYS[5] the bucket's layout key.

// ARGV: owner, fingerprint, lease ms, ttl ms, keep ms, member. Answers {1, now} after writing
// record_rules' claim_record, or {0, now, fields} with the record that is there. Also drops the
// expiry index's entries of records Redis has already deleted by itself (their expire_at + keep
// has passed), so that the index stays bounded without a janitor.
inline constexpr const char* claim = R"(
local now = now_ms()
local keep = tonumber(ARGV[5])
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', '(' .. int(now - keep))
local rec = load(KEYS[1])
if rec then return {0, now, fields(rec)} end
local lease_until = now + tonumber(ARGV[3])
local expire_at = now + tonumber(ARGV[4])
save(KEYS[1], KEYS[5], {status = PROCESSING, fence = 1, owner = ARGV[1], fingerprint = ARGV[2],
  snapshot = '', retryable = 0, attempts = 1, created_at = now, updated_at = now,
  lease_until = lease_until, expire_at = expire_at}, false, expire_at + keep)
redis.call('ZADD', KEYS[2], int(lease_until), ARGV[6])
redis.call('ZADD', KEYS[3], int(expire_at), ARGV[6])
return {1, now}
)";

// ARGV: decision ("expired" or "retry"), the fence, owner and recovery points read, keep ms,
// member, then the new record's values in FIELDS' order (take_over()'s). Answers 1 when
// written, 0 when the record moved on since it was read. A retry or stale takeover keeps the
// points read, so it is also guarded by them: a step the old claim recorded since the read must
// not be lost.
inline constexpr const char* take_over = R"(
local now = now_ms()
local rec, packed = load(KEYS[1])
if not rec or not rec.status or rec.fence ~= ARGV[2] or rec.owner ~= ARGV[3] then return 0 end
local expired = is_expired(rec.status, rec.expire_at, now)
local holds
if ARGV[1] == 'expired' then
  holds = expired
else
  -- record_rules: is_retry_due
  holds = not expired and ((rec.status == PROCESSING and tonumber(rec.lease_until) <= now) or
                           (rec.status == FAILED and rec.retryable == '1')) and
          (rec.recovery_points or '') == ARGV[4]
end
if not holds then return 0 end
local new = {}
for i, f in ipairs(FIELDS) do new[f] = ARGV[6 + i] end
save(KEYS[1], KEYS[5], new, packed)
redis.call('ZADD', KEYS[2], new.lease_until, ARGV[6])
set_expiry(KEYS[1], KEYS[3], KEYS[4], ARGV[6], new.status, new.expire_at, new.updated_at,
  ARGV[5])
return 1
)";

// ARGV: fence, owner, status, snapshot, retryable, member. Writes record_rules' finished()
// when the claim is still held; answers 1, or 0 (nothing written).
inline constexpr const char* finish = R"(
local rec, packed = load(KEYS[1])
-- record_rules: holds
if not rec or rec.status ~= PROCESSING or rec.fence ~= ARGV[1] or rec.owner ~= ARGV[2] then
  return 0
end
rec.status, rec.snapshot, rec.retryable = ARGV[3], ARGV[4], ARGV[5]
rec.updated_at = now_ms()
save(KEYS[1], KEYS[5], rec, packed)
redis.call('ZREM', KEYS[2], ARGV[6])
return 1
)";

// KEYS: record. Answers {now} or {now, fields}.
inline constexpr const char* read = R"(
local now = now_ms()
local rec = load(KEYS[1])
if not rec then return {now} end
return {now, fields(rec)}
)";

// KEYS: an index. ARGV: limit. The members whose score (a lease_until or an expire_at) has
// come, by the server's clock.
inline constexpr const char* due = R"(
return redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', int(now_ms()), 'LIMIT', '0', ARGV[1])
)";

// ARGV: member, then record_rules' released(): status, snapshot, retryable. Answers 1 when it
// released a stale claim. An entry that no longer names a processing record (finished, purged,
// expired) leaves the index; one whose lease was renewed by a takeover is scored anew.
inline constexpr const char* release = R"(
local now = now_ms()
local rec, packed = load(KEYS[1])
if not rec or rec.status ~= PROCESSING or tonumber(rec.expire_at) <= now then
  redis.call('ZREM', KEYS[2], ARGV[1])
  return 0
end
if tonumber(rec.lease_until) > now then
  redis.call('ZADD', KEYS[2], rec.lease_until, ARGV[1])
  return 0
end
-- record_rules: is_stale
rec.status, rec.snapshot, rec.retryable = ARGV[2], ARGV[3], ARGV[4]
rec.updated_at = int(now)
save(KEYS[1], KEYS[5], rec, packed)
redis.call('ZREM', KEYS[2], ARGV[1])
return 1
)";

// ARGV: member. Deletes the record when it has expired and answers 1. An entry of a record that
// is gone leaves the indexes; one whose record was renewed by a takeover is scored anew; an
// outcome_unknown record never expires (it has no entry to meet unless one was left behind).
inline constexpr const char* purge = R"(
local now = now_ms()
local rec = load(KEYS[1])
local e = rec and rec.expire_at
if rec and rec.status == UNKNOWN then
  redis.call('ZREM', KEYS[3], ARGV[1])
  return 0
end
-- record_rules: is_expired
if e and tonumber(e) > now then
  redis.call('ZADD', KEYS[3], e, ARGV[1])
  return 0
end
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[3], ARGV[1])
if not e then return 0 end
redis.call('DEL', KEYS[1])
return 1
)";

// ARGV: the fence and owner read, keep ms, member, then field/value pairs: what repaired()
// computed for the fields it may change (the recovery points are left as they are). Answers 1
// when written, 0 when the record moved on since it was read (or is gone).
inline constexpr const char* repair = R"(
local rec, packed = load(KEYS[1])
-- record_rules: repair_holds, on the ticket read (the same fence under another owner is not
-- the record the repair was decided on)
if not rec or not rec.status or rec.fence ~= ARGV[1] or rec.owner ~= ARGV[2] then return 0 end
for i = 5, #ARGV, 2 do rec[ARGV[i]] = ARGV[i + 1] end
save(KEYS[1], KEYS[5], rec, packed)
-- repaired() never leaves a record processing
redis.call('ZREM', KEYS[2], ARGV[4])
set_expiry(KEYS[1], KEYS[3], KEYS[4], ARGV[4], rec.status, rec.expire_at, rec.updated_at, ARGV[3])
return 1
)";

// ARGV: fence, owner, the recovery points read, the points to write. Writes them while the
// claim is held and the stored points are still those read; answers 1, or 0.
inline constexpr const char* points = R"(
local rec, packed = load(KEYS[1])
-- record_rules: holds
if not rec or rec.status ~= PROCESSING or rec.fence ~= ARGV[1] or rec.owner ~= ARGV[2] then
  return 0
end
if (rec.recovery_points or '') ~= ARGV[3] then return 0 end
rec.recovery_points = ARGV[4]
rec.updated_at = int(now_ms())
save(KEYS[1], KEYS[5], rec, packed)
return 1
)";

// KEYS: an index. ARGV: how far before the server's now the scores end (ms; empty: no end),
// the score to start at, how many members of that score to skip, how many to answer.
// Answers {member, score, member, score, ...}: a page of the index in score order.
inline constexpr const char* range = R"(
local max = '+inf'
if ARGV[1] ~= '' then max = int(now_ms() - tonumber(ARGV[1])) end
return redis.call('ZRANGEBYSCORE', KEYS[1], ARGV[2], max, 'WITHSCORES', 'LIMIT', ARGV[3], ARGV[4])
)";

// KEYS: record. Answers {now} or {now, fields, bytes}: read's answer and what MEMORY USAGE
// says the record takes.
inline constexpr const char* sized_read = R"(
local now = now_ms()
local rec = load(KEYS[1])
if not rec then return {now} end
return {now, fields(rec), redis.call('MEMORY', 'USAGE', KEYS[1], 'SAMPLES', '0')}
)";

// KEYS: any keys of one slot. Answers the bytes MEMORY USAGE says they take (a missing key
// takes none).
inline constexpr const char* sizes = R"(
local bytes = 0
for i = 1, #KEYS do bytes = bytes + (redis.call('MEMORY', 'USAGE', KEYS[i], 'SAMPLES', '0') or 0) end
return bytes
)";

// KEYS: an index. ARGV: ZSCAN's cursor, its COUNT. Answers ZSCAN's reply: {cursor, {member,
// score, ...}}.
inline constexpr const char* scan = R"(
return redis.call('ZSCAN', KEYS[1], ARGV[1], 'COUNT', ARGV[2])
)";

// KEYS: a string key. Answers its value, or nil.
inline constexpr const char* get = R"(
return redis.call('GET', KEYS[1])
)";

// KEYS: a bucket's layout key. ARGV: the stamp. Writes it unless the key holds a stamp already
// (never over a newer idem's); answers 1 when it wrote.
inline constexpr const char* stamp = R"(
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('SET', KEYS[1], ARGV[1])
return 1
)";

}  // namespace script_text

// Each script declares its flags (Redis 7): a writing script is refused with OOM by a
// server at its maxmemory under noeviction, before it runs (a script without a shebang
// would write anyway); a reading one runs there too.
inline RecordScripts make_record_scripts() {
  const std::string p = script_text::prelude();
  const std::string writes = "#!lua\n" + p;
  const std::string reads = "#!lua flags=no-writes\n" + p;
  return {make_script(writes + script_text::claim),  make_script(writes + script_text::take_over),
          make_script(writes + script_text::finish), make_script(reads + script_text::read),
          make_script(reads + script_text::due),     make_script(writes + script_text::release),
          make_script(writes + script_text::purge),  make_script(writes + script_text::repair),
          make_script(writes + script_text::points), make_script(reads + script_text::range),
          make_script(reads + script_text::scan),    make_script(reads + script_text::sized_read),
          make_script(reads + script_text::sizes),   make_script(reads + script_text::get),
          make_script(writes + script_text::stamp)};
}

}  // namespace idem::redis::detail
