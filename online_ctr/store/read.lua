-- Read features' state from their buckets (read_records: reads.lua, prepended).
-- KEYS: on Redis Cluster the route key (online_ctr/store/keys.py) of the one shard the
-- records are in (declared so the cluster routes the call there); on a single Redis none, and
-- the records may be of any shards. ARGV: 1 field bytes, 2 value bytes, 3 and 4 what comes before and after a shard's
-- number in its bucket key prefix, 5 the records (u16 shard, u32 bucket, field), in any order.
-- Returns {values, present} (see read_records).
return {read_records(tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3], ARGV[4], ARGV[5])}
