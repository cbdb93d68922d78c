-- Migration 2: the delivery ledger, every terminal (event, token) outcome as it was published,
-- so a redelivered Kafka message republishes it instead of pushing again. Pruned by age.

CREATE TABLE IF NOT EXISTS push.deliveries (
    event_id text NOT NULL,
    token text NOT NULL,
    topic text NOT NULL,
    user_id text NOT NULL,
    result text NOT NULL,
    unregistered_event text NULL,
    recorded_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (event_id, token)
);

CREATE INDEX IF NOT EXISTS deliveries_recorded_at ON push.deliveries (recorded_at);
