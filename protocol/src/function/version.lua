-- hero_version: the version of this library, so a client can tell a stale one from its own.
-- KEYS: none.  ARGV: none.
-- Returns: the version string.
local function hero_version(keys, args)
  return VERSION
end
