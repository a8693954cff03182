-- namespace.lua -- namespace and token metadata (docs/commands.md): one call per admin change or lookup.
--
-- KEYS[1]  A       metadata prefix "dq:{auth}:" (all metadata keys share its hash tag)
-- KEYS[2..3] the pool's registry and due index (common/keys.lua; unused here)
-- ARGV[1]  op      "lookup" | "owner" | "create" | "delete" | "token_add" | "token_revoke"
--                  | "token_list" | "list" | "info"
-- ARGV[2]  ns      namespace name (checked by deferq; "" for "list")
-- ARGV[3..] per op, below
--
-- Keys (docs/storage.md "Namespaces and tokens"):
--   A.."namespaces"    HASH  ns -> pool
--   A.."ns:"..ns       HASH  pool, description, created_ms
--   A.."tokens:"..ns   HASH  hex SHA-256 of a token -> created_ms .. " " .. description
--   A.."owners"        HASH  hex SHA-256 of a token -> ns (a one-argument AUTH <token> finds its
--                            namespace); kept by every change below, built once from the tokens
--                            of every namespace by the first change after an upgrade (the mark
--                            A.."owners_v1" says it was)
-- Tokens are never stored: deferq sends their SHA-256 digest (hex), computed with libcrypto.
-- Registered twice (scripts/list.txt): the reads (lookup, owner, token_list, list, info) also as
-- namespace_read (no-writes: AUTH works at maxmemory and while Redis cannot persist).
--
-- State change and Returns, per op:
--   lookup        none. { pool or false, digest1, digest2, ... } (every digest of ns)
--   owner         ARGV[2] digest (not a namespace). The namespace whose token it is, or false.
--   create        ARGV[3] pool, ARGV[4] description, ARGV[5] now_ms. Creates ns bound to pool.
--                 "OK", or error "ERR namespace already exists".
--   delete        the namespace and its tokens. 1 if it existed, else 0.
--   token_add     ARGV[3] digest, ARGV[4] description, ARGV[5] now_ms. 1, or error
--                 "ERR no such namespace".
--   token_revoke  ARGV[3] digest (64 hex) or id (its first 16 hex, as token_list shows it).
--                 Removes the token(s). Number removed.
--   token_list    none. { id1, created_ms1, description1, ... } (ids, never digests)
--   list          none. { ns1, pool1, ... }
--   info          none. false, or { pool, description, created_ms, tokens }

-- BEGIN common
-- END common

local A = KEYS[1]
local op, ns = ARGV[1], ARGV[2]
local NAMESPACES = A .. 'namespaces'
local ID_LEN = 16

if op == 'list' then
  return redis.call('HGETALL', NAMESPACES)
end
if not ns or ns == '' then return redis.error_reply('ERR deferq namespace: bad arguments') end
local OWNERS, OWNERS_MARK = A .. 'owners', A .. 'owners_v1'
if op == 'owner' then
  local owner = redis.call('HGET', OWNERS, ns)
  if owner or redis.call('EXISTS', OWNERS_MARK) == 1 then return owner end
  -- Tokens made before the index existed (no change since): look in each namespace's tokens.
  for _, name in ipairs(redis.call('HKEYS', NAMESPACES)) do
    if redis.call('HEXISTS', A .. 'tokens:' .. name, ns) == 1 then return name end
  end
  return false
end
local META, TOKENS = A .. 'ns:' .. ns, A .. 'tokens:' .. ns

-- The owners index, built from every namespace's tokens by the first change that finds it
-- missing (a library of an older deferq made those tokens).
local function index_owners()
  if redis.call('EXISTS', OWNERS_MARK) == 1 then return end
  for _, name in ipairs(redis.call('HKEYS', NAMESPACES)) do
    for _, digest in ipairs(redis.call('HKEYS', A .. 'tokens:' .. name)) do
      redis.call('HSET', OWNERS, digest, name)
    end
  end
  redis.call('SET', OWNERS_MARK, '1')
end

-- Removes ns's tokens and their owners entries.
local function drop_tokens()
  for _, digest in ipairs(redis.call('HKEYS', TOKENS)) do
    if redis.call('HGET', OWNERS, digest) == ns then redis.call('HDEL', OWNERS, digest) end
  end
  redis.call('DEL', TOKENS)
end

if op ~= 'lookup' and op ~= 'token_list' and op ~= 'info' then index_owners() end

if op == 'lookup' then
  local out = {redis.call('HGET', NAMESPACES, ns)}
  local digests = redis.call('HKEYS', TOKENS)
  for i = 1, #digests do out[i + 1] = digests[i] end
  return out
elseif op == 'create' then
  local pool, desc, now = ARGV[3], ARGV[4], ARGV[5]
  if not pool or not desc or not arg_int(now) then
    return redis.error_reply('ERR deferq namespace: bad arguments')
  end
  if redis.call('HSETNX', NAMESPACES, ns, pool) == 0 then
    return redis.error_reply('ERR namespace already exists')
  end
  drop_tokens()  -- tokens of an earlier namespace of that name never come back
  redis.call('HSET', META, 'pool', pool, 'description', desc, 'created_ms', now)
  return redis.status_reply('OK')
elseif op == 'delete' then
  local existed = redis.call('HDEL', NAMESPACES, ns)
  drop_tokens()
  redis.call('DEL', META)
  return existed
elseif op == 'token_add' then
  local digest, desc, now = ARGV[3], ARGV[4], ARGV[5]
  if not digest or #digest ~= 64 or not desc or not arg_int(now) then
    return redis.error_reply('ERR deferq namespace: bad arguments')
  end
  if redis.call('HEXISTS', NAMESPACES, ns) == 0 then
    return redis.error_reply('ERR no such namespace')
  end
  redis.call('HSET', TOKENS, digest, now .. ' ' .. desc)
  redis.call('HSET', OWNERS, digest, ns)
  return 1
elseif op == 'token_revoke' then
  local which = ARGV[3] or ''
  local removed = 0
  for _, digest in ipairs(redis.call('HKEYS', TOKENS)) do
    if (#which == 64 and digest == which) or
       (#which == ID_LEN and string.sub(digest, 1, ID_LEN) == which) then
      removed = removed + redis.call('HDEL', TOKENS, digest)
      if redis.call('HGET', OWNERS, digest) == ns then redis.call('HDEL', OWNERS, digest) end
    end
  end
  return removed
elseif op == 'token_list' then
  local all = redis.call('HGETALL', TOKENS)
  local out = {}
  for i = 1, #all, 2 do
    local v = all[i + 1]
    local sp = string.find(v, ' ', 1, true) or (#v + 1)
    out[#out + 1] = string.sub(all[i], 1, ID_LEN)
    out[#out + 1] = string.sub(v, 1, sp - 1)
    out[#out + 1] = string.sub(v, sp + 1)
  end
  return out
elseif op == 'info' then
  local m = redis.call('HMGET', META, 'pool', 'description', 'created_ms')
  if not m[1] then return false end
  return {m[1], m[2] or '', m[3] or '0', redis.call('HLEN', TOKENS)}
end
return redis.error_reply('ERR deferq namespace: unknown op')
