-- The token lookup (WHERE topic = $1 AND user_id = ANY($2) AND unregistered_at IS NULL) as a
-- prepared statement must stay fast whatever the table's statistics say. With the index led by
-- topic, a plan made on stale statistics (right after an app API bulk-loads tokens, before
-- auto-analyze) scans the index by topic alone and filters every token of the app. Led by
-- user_id, the generic plan (Herald's pipeline pool plans generically) probes by (user_id,
-- topic) in the statistics states measured (BENCHMARKS.md, "What each change bought").
CREATE INDEX IF NOT EXISTS device_tokens_active_by_user_first
    ON push.device_tokens (user_id, topic) WHERE unregistered_at IS NULL;

DROP INDEX IF EXISTS push.device_tokens_active_by_user;
