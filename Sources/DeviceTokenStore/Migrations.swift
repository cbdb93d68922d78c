/// Herald's schema migrations, applied in order and recorded in `push.schema_migrations`.
///
/// A migration is never edited once released: changes come as a new version.
enum Migrations {
    struct Migration: Sendable {
        var version: Int
        var name: String
        var sql: [String]
    }

    static let all: [Migration] = [
        Migration(
            version: 1,
            name: "device tokens",
            sql: [
                """
                CREATE TABLE IF NOT EXISTS push.device_tokens (
                    topic text NOT NULL,
                    token text NOT NULL,
                    user_id text NOT NULL,
                    environment text NOT NULL CHECK (environment IN ('production', 'sandbox')),
                    registered_at timestamptz NOT NULL,
                    updated_at timestamptz NOT NULL,
                    unregistered_at timestamptz NULL,
                    PRIMARY KEY (topic, token)
                )
                """,
                """
                CREATE INDEX IF NOT EXISTS device_tokens_active_by_user
                    ON push.device_tokens (topic, user_id) WHERE unregistered_at IS NULL
                """,
            ]
        ),
        Migration(
            version: 2,
            name: "delivery ledger",
            sql: [
                """
                CREATE TABLE IF NOT EXISTS push.deliveries (
                    event_id text NOT NULL,
                    token text NOT NULL,
                    topic text NOT NULL,
                    user_id text NOT NULL,
                    result text NOT NULL,
                    unregistered_event text NULL,
                    recorded_at timestamptz NOT NULL DEFAULT now(),
                    PRIMARY KEY (event_id, token)
                )
                """,
                "CREATE INDEX IF NOT EXISTS deliveries_recorded_at ON push.deliveries (recorded_at)",
            ]
        ),
    ]
}
