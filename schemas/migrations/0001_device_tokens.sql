-- Migration 1: the device-token registry (docs/design.md, "Database"). App APIs may write this table
-- directly; Herald applies push.tokens updates and APNs' 410 answers to it with the ordering rule.

CREATE TABLE IF NOT EXISTS push.device_tokens (
    topic text NOT NULL,
    token text NOT NULL,
    user_id text NOT NULL,
    environment text NOT NULL CHECK (environment IN ('production', 'sandbox')),
    registered_at timestamptz NOT NULL,
    updated_at timestamptz NOT NULL,
    unregistered_at timestamptz NULL,
    PRIMARY KEY (topic, token)
);

-- The hot lookup: a batch of users' active tokens for one app.
CREATE INDEX IF NOT EXISTS device_tokens_active_by_user
    ON push.device_tokens (topic, user_id) WHERE unregistered_at IS NULL;
