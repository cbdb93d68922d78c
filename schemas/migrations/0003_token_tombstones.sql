-- Migration 3: unregistrations that arrived before their token had a row.
--
-- push.device_tokens.user_id is NOT NULL (the contract), so an unregister (or a 410) for a
-- token without a row cannot be stored there. It is kept here instead and treated as that
-- row's unregistered_at: a register that is not later than it stores the row unregistered,
-- and the next write to a row that exists folds it in with the ordering rule. Herald deletes a
-- tombstone once it is folded into a row, and prunes the rest by age.

CREATE TABLE IF NOT EXISTS push.token_tombstones (
    topic text NOT NULL,
    token text NOT NULL,
    unregistered_at timestamptz NOT NULL,
    recorded_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (topic, token)
);

CREATE INDEX IF NOT EXISTS token_tombstones_unregistered_at
    ON push.token_tombstones (unregistered_at);

-- Purging tokens unregistered long ago (HERALD_TOKEN_PURGE_DAYS) without scanning the table.
CREATE INDEX IF NOT EXISTS device_tokens_unregistered_at
    ON push.device_tokens (unregistered_at) WHERE unregistered_at IS NOT NULL;
