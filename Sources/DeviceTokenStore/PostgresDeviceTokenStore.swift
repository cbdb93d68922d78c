public import APNSCore
public import Foundation
public import Logging
public import PostgresNIO

/// The registry in PostgreSQL (`push.device_tokens`), through a postgres-nio client that the
/// caller runs as a service.
public struct PostgresDeviceTokenStore: DeviceTokenStore {
    let client: PostgresClient
    let logger: Logger

    public init(client: PostgresClient, logger: Logger) {
        self.client = client
        self.logger = logger
    }

    /// Applies every migration not yet recorded, under an advisory lock so that instances
    /// starting together do not race. Safe to run any number of times.
    public func migrate() async throws {
        try await client.withTransaction(logger: logger) { connection in
            try await connection.query("SELECT pg_advisory_xact_lock(7215300411)", logger: logger)
            try await connection.query("CREATE SCHEMA IF NOT EXISTS push", logger: logger)
            try await connection.query(
                """
                CREATE TABLE IF NOT EXISTS push.schema_migrations (
                    version integer PRIMARY KEY,
                    name text NOT NULL,
                    applied_at timestamptz NOT NULL DEFAULT now()
                )
                """,
                logger: logger
            )
            var applied = Set<Int>()
            for try await version in try await connection.query(
                "SELECT version FROM push.schema_migrations",
                logger: logger
            ).decode(Int.self) {
                applied.insert(version)
            }
            for migration in Migrations.all where !applied.contains(migration.version) {
                for statement in migration.statements {
                    try await connection.query(PostgresQuery(unsafeSQL: statement), logger: logger)
                }
                try await connection.query(
                    "INSERT INTO push.schema_migrations (version, name) VALUES (\(migration.version), \(migration.name))",
                    logger: logger
                )
                logger.info("applied migration", metadata: ["db.migration.version": "\(migration.version)"])
            }
        }
    }

    public func activeTokens(
        topic: String,
        userIDs: [String],
        environment: APNSEnvironment?
    ) async throws -> [String: [DeviceToken]] {
        let statement = ActiveTokensStatement(topic: topic, userIDs: userIDs, environment: environment?.rawValue)
        var tokens: [String: [DeviceToken]] = [:]
        for try await (userID, token, environmentText) in try await client.execute(statement, logger: logger) {
            guard let environment = APNSEnvironment(rawValue: environmentText) else { continue }
            tokens[userID, default: []].append(DeviceToken(userID: userID, token: token, environment: environment))
        }
        return tokens
    }

    @discardableResult
    public func apply(_ update: TokenRegistryUpdate) async throws -> Bool {
        switch update.action {
        case .register:
            guard let userID = update.userID else { return false }
            let rows = try await client.query(
                """
                INSERT INTO push.device_tokens AS row
                    (topic, token, user_id, environment, registered_at, updated_at, unregistered_at)
                VALUES (\(update.topic), \(update.token), \(userID), \(update.environment.rawValue),
                        \(update.timestamp), now(), NULL)
                ON CONFLICT (topic, token) DO UPDATE
                SET user_id = EXCLUDED.user_id, environment = EXCLUDED.environment,
                    registered_at = EXCLUDED.registered_at, updated_at = now(), unregistered_at = NULL
                WHERE EXCLUDED.registered_at > row.registered_at
                  AND (row.unregistered_at IS NULL OR EXCLUDED.registered_at > row.unregistered_at)
                RETURNING 1
                """,
                logger: logger
            )
            return try await rows.collect().count > 0
        case .unregister:
            return try await markUnregistered(topic: update.topic, token: update.token, at: update.timestamp)
        }
    }

    public func markUnregistered(topic: String, token: String, at time: Date) async throws -> Bool {
        try await client.query(Self.markUnregisteredQuery(topic: topic, token: token, at: time), logger: logger)
            .collect().count > 0
    }

    /// Sets `unregistered_at` when `time` is later than both the registration and any earlier
    /// unregistration (the contract's ordering rule); returns a row only when it changed.
    static func markUnregisteredQuery(topic: String, token: String, at time: Date) -> PostgresQuery {
        """
        UPDATE push.device_tokens
        SET unregistered_at = \(time), updated_at = now()
        WHERE topic = \(topic) AND token = \(token)
          AND \(time) > registered_at
          AND (unregistered_at IS NULL OR \(time) > unregistered_at)
        RETURNING 1
        """
    }
}

/// The hot lookup: every active token of a batch of users for one app, in one round trip.
struct ActiveTokensStatement: PostgresPreparedStatement {
    static let sql = """
        SELECT user_id, token, environment FROM push.device_tokens
        WHERE topic = $1 AND user_id = ANY($2) AND unregistered_at IS NULL
          AND ($3::text IS NULL OR environment = $3::text)
        """
    typealias Row = (String, String, String)

    var topic: String
    var userIDs: [String]
    var environment: String?

    func makeBindings() throws -> PostgresBindings {
        var bindings = PostgresBindings(capacity: 3)
        bindings.append(topic)
        bindings.append(userIDs)
        bindings.append(environment)
        return bindings
    }

    func decodeRow(_ row: PostgresRow) throws -> Row {
        try row.decode(Row.self)
    }
}
