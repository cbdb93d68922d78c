-- Migration 5: the delivery ledger partitioned by day, with compact rows.
--
-- One partition per UTC day of the Kafka record that carried the event (`day`, days since
-- 1970-01-01): a redelivered record has the same timestamp, so its lookup touches one partition,
-- and pruning drops whole partitions instead of deleting rows. Housekeeping (and `herald
-- migrate`) create the days of the retention window and three days ahead, and drop a day once
-- all of it is older than the retention. Records outside the created days (a producer clock far
-- ahead, a record older than the retention) land in the default partition, which housekeeping
-- rebuilds when it holds expired rows or rows of a day it creates.
--
-- A row keeps only what the event does not bring back: the key, the user, and the outcome's
-- fields (`status`: 1 delivered, 2 unregistered, 3 rejected, 4 failed, 5 expired). The apns-id
-- is derived from (event id, token) again. `event_key` is md5(event id) as a uuid. `token` holds a
-- device token's bytes (`device`) or the UTF-8 of another key (a broadcast channel's, a channel
-- command's). `message` holds a whole result only for answers the columns do not describe
-- (channel management).
--
-- push.deliveries (migration 2) is no longer written; lookups read it too until housekeeping
-- drops it, once its newest row is older than the retention.
CREATE TABLE IF NOT EXISTS push.delivery_ledger (
    completed_at bigint NOT NULL,
    unregistered_at bigint NULL,
    event_key uuid NOT NULL,
    day integer NOT NULL,
    latency_ms integer NOT NULL,
    status smallint NOT NULL,
    apns_status smallint NULL,
    attempts smallint NOT NULL,
    sandbox boolean NOT NULL,
    device boolean NOT NULL,
    token bytea NOT NULL,
    user_id text NOT NULL,
    reason text NULL,
    apns_unique_id text NULL,
    message text NULL,
    PRIMARY KEY (event_key, token, day)
) PARTITION BY RANGE (day);

CREATE TABLE IF NOT EXISTS push.delivery_ledger_default PARTITION OF push.delivery_ledger DEFAULT;
