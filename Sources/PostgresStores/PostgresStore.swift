package import PushStores
import APNSCore
package import Logging
package import PostgresNIO

/// Herald's stores in PostgreSQL, over one postgres-nio client that the caller runs as a
/// service: the registry (`push.device_tokens`, plus `push.token_tombstones` for
/// unregistrations that arrive before their token has a row), the delivery ledger
/// (``DeliveryLedger``, PostgresDeliveryLedger.swift) and housekeeping's statements.
///
/// Herald's writes to one token are serialised by a transaction-scoped advisory lock; rows that
/// app APIs write directly are read by the same ordering rule.
package struct PostgresStore: DeviceTokenStore {
    let client: PostgresClient
    let logger: Logger
    /// Leases the pipeline's statements and the registry's writes connections that answer.
    let idleCheck: IdleConnectionCheck
    /// The ledger table before migration 5, read until it is dropped.
    let unpartitionedLedger = UnpartitionedLedger()

    package init(client: PostgresClient, logger: Logger, idleCheck: IdleConnectionCheck = IdleConnectionCheck()) {
        self.client = client
        self.logger = logger
        self.idleCheck = idleCheck
    }

    /// `statement`'s rows (``PostgresConnection/rows(of:logger:)``) on a connection that answers.
    func rows<Statement: PostgresPreparedStatement>(of statement: Statement) async throws -> [Statement.Row] {
        try await idleCheck.withConnection(of: client, logger: logger) { try await $0.rows(of: statement, logger: logger) }
    }

    /// `body` in one transaction on a connection that answers.
    func withTransaction<Result>(_ body: (PostgresConnection) async throws -> sending Result) async throws -> Result {
        try await idleCheck.withConnection(of: client, logger: logger) { try await $0.withTransaction(logger: logger, body) }
    }

    /// Applies every migration not yet recorded, under an advisory lock so that instances
    /// starting together do not race. Safe to run any number of times.
    package func migrate() async throws {
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

    package func activeDevices(apnsTopic: String?, fcmPackage: String?, webPushApp: String?, userIDs: [String]) async throws -> [String: [DeviceToken]] {
        let statement = ActiveDevicesStatement(apnsTopic: apnsTopic, fcmPackage: fcmPackage, webPushApp: webPushApp, userIDs: userIDs)
        var devices: [String: [DeviceToken]] = [:]
        for (userID, token, environment, platform, target, keys) in try await rows(of: statement) {
            guard
                let device = Self.device(
                    userID: userID, token: token, environment: environment, platform: platform, fcmTarget: target, webPushKeys: keys)
            else {
                continue
            }
            devices[userID, default: []].append(device)
        }
        return devices
    }

    /// The device a registry row describes; nil for an environment or a platform Herald does not
    /// know (a row an app API wrote by hand). `webPushKeys` is ``ActiveDevicesStatement/webPushKeys``'s
    /// text: `p256dh auth [vapid key]`; a subscription row without keys keeps none, and its
    /// sends are rejected.
    static func device(userID: String, token: String, environment: String, platform: String, fcmTarget: String?, webPushKeys: String?)
        -> DeviceToken?
    {
        guard let environment = APNSEnvironment(rawValue: environment), let platform = DevicePlatform(rawValue: platform) else { return nil }
        let target = fcmTarget.flatMap(FCMTargetKind.init(rawValue:)) ?? .token
        let keys = webPushKeys.map { $0.split(separator: " ").map(String.init) }.flatMap { parts in
            parts.count >= 2 ? WebPushKeys(p256dh: parts[0], auth: parts[1], vapidPublicKey: parts.count > 2 ? parts[2] : nil) : nil
        }
        return DeviceToken(userID: userID, token: token, environment: environment, platform: platform, fcmTarget: target, webPush: keys)
    }

    @discardableResult
    package func apply(_ update: TokenRegistryUpdate) async throws -> Bool {
        switch update.action {
        case .register:
            guard let userID = update.userID else { return false }
            let logger = self.logger
            return try await withTransaction { connection in
                try await Self.lock(topic: update.topic, token: update.token, on: connection, logger: logger)
                try await Self.foldTombstone(topic: update.topic, token: update.token, on: connection, logger: logger)
                // Without a row, an unregistration that arrived first is still pending as a
                // tombstone: a registration that is not later than it is stored unregistered,
                // the state the two updates leave in order.
                let rows = try await connection.query(
                    """
                    WITH pending AS (
                        DELETE FROM push.token_tombstones
                        WHERE topic = \(update.topic) AND token = \(update.token)
                        RETURNING unregistered_at
                    )
                    INSERT INTO push.device_tokens AS row
                        (topic, token, user_id, environment, registered_at, updated_at, unregistered_at, platform, fcm_target,
                         webpush_p256dh, webpush_auth, webpush_vapid_key)
                    SELECT \(update.topic), \(update.token), \(userID), \(update.environment.rawValue),
                           \(update.timestamp), now(),
                           (SELECT unregistered_at FROM pending WHERE unregistered_at >= \(update.timestamp)),
                           \(update.platform.rawValue), \(update.platform == .fcm ? update.fcmTarget.rawValue : nil),
                           \(update.webPush?.p256dh), \(update.webPush?.auth), \(update.webPush?.vapidPublicKey)
                    ON CONFLICT (topic, token) DO UPDATE
                    SET user_id = EXCLUDED.user_id, environment = EXCLUDED.environment,
                        platform = EXCLUDED.platform, fcm_target = EXCLUDED.fcm_target,
                        webpush_p256dh = EXCLUDED.webpush_p256dh, webpush_auth = EXCLUDED.webpush_auth,
                        webpush_vapid_key = EXCLUDED.webpush_vapid_key,
                        registered_at = EXCLUDED.registered_at, updated_at = now(), unregistered_at = NULL
                    WHERE EXCLUDED.registered_at > row.registered_at
                      AND (row.unregistered_at IS NULL OR EXCLUDED.registered_at > row.unregistered_at)
                    RETURNING 1
                    """,
                    logger: logger
                ).collect()
                return !rows.isEmpty
            }
        case .unregister:
            return try await markUnregistered(topic: update.topic, token: update.token, at: update.timestamp)
        }
    }

    package func markUnregistered(topic: String, token: String, at time: Timestamp) async throws -> Bool {
        let logger = self.logger
        return try await withTransaction { connection in
            try await Self.markUnregistered(topic: topic, token: token, at: time, on: connection, logger: logger)
        }
    }

    /// Applies an unregistration at `time` inside the caller's transaction; returns whether it
    /// marked a row.
    ///
    /// With a row, the ordering rule decides: `unregistered_at = time` when `time` is later than
    /// both `registered_at` and any earlier `unregistered_at`. Without one (the unregistration
    /// overtook its registration, or the row was deleted), `time` is kept as a tombstone for the
    /// registration to find, so an out-of-order pair ends as it would in order.
    static func markUnregistered(
        topic: String,
        token: String,
        at time: Timestamp,
        on connection: PostgresConnection,
        logger: Logger
    ) async throws -> Bool {
        try await lock(topic: topic, token: token, on: connection, logger: logger)
        try await foldTombstone(topic: topic, token: token, on: connection, logger: logger)
        let marked = try await connection.query(
            """
            WITH marked AS (
                UPDATE push.device_tokens
                SET unregistered_at = \(time), updated_at = now()
                WHERE topic = \(topic) AND token = \(token)
                  AND \(time) > registered_at
                  AND (unregistered_at IS NULL OR \(time) > unregistered_at)
                RETURNING 1
            ), tombstone AS (
                INSERT INTO push.token_tombstones AS t (topic, token, unregistered_at)
                SELECT \(topic), \(token), \(time)
                WHERE NOT EXISTS (SELECT 1 FROM push.device_tokens WHERE topic = \(topic) AND token = \(token))
                ON CONFLICT (topic, token) DO UPDATE
                SET unregistered_at = EXCLUDED.unregistered_at, recorded_at = now()
                WHERE EXCLUDED.unregistered_at > t.unregistered_at
            )
            SELECT 1 FROM marked
            """,
            logger: logger
        ).collect()
        return !marked.isEmpty
    }

    /// Serialises Herald's writes to one token until the transaction ends, so that a tombstone
    /// and a row for the same token are never written side by side unseen by each other.
    /// The two-key form keeps these locks apart from the migrations' one-key lock.
    private static func lock(topic: String, token: String, on connection: PostgresConnection, logger: Logger) async throws {
        _ = try await connection.query(
            "SELECT pg_advisory_xact_lock(\(tokenLockClass), hashtext(\(topic) || ' ' || \(token)))",
            logger: logger
        ).collect()
    }

    /// The advisory-lock class of per-token locks ("HRLD").
    private static let tokenLockClass: Int32 = 0x4852_4C44

    /// When a row and a tombstone both exist (an app API inserted the row after the tombstone
    /// was written), applies the tombstone to the row with the ordering rule and deletes it.
    private static func foldTombstone(
        topic: String,
        token: String,
        on connection: PostgresConnection,
        logger: Logger
    ) async throws {
        _ = try await connection.query(
            """
            WITH pending AS (
                DELETE FROM push.token_tombstones AS t
                WHERE t.topic = \(topic) AND t.token = \(token)
                  AND EXISTS (SELECT 1 FROM push.device_tokens AS d WHERE d.topic = \(topic) AND d.token = \(token))
                RETURNING t.unregistered_at
            )
            UPDATE push.device_tokens AS d
            SET unregistered_at = pending.unregistered_at, updated_at = now()
            FROM pending
            WHERE d.topic = \(topic) AND d.token = \(token)
              AND pending.unregistered_at > d.registered_at
              AND (d.unregistered_at IS NULL OR pending.unregistered_at > d.unregistered_at)
            """,
            logger: logger
        ).collect()
    }
}

/// The hot lookup: the active devices of a set of users on every platform, in one round trip:
/// APNs devices under `$1` (the bundle ID), FCM devices under `$2` (the Android package) and
/// browser subscriptions under `$4` (the web app); a NULL one matches none.
///
/// Only the users can drive it: `topic || ''` keeps the primary key (led by topic) out of the
/// plan, so the lookup probes `device_tokens_active_by_user_first` by user and filters a user's
/// few tokens by app. Statistics gathered while an app had two tokens, then a bulk load of
/// 100,000 before auto-analyze, made both the generic plan and one without sequential scans
/// read every token of the app by topic; this shape still probes by user in that state (psql
/// EXPLAIN ANALYZE; BENCHMARKS.md, "What each change bought"), and the pipeline's pool turns
/// sequential scans off.
struct ActiveDevicesStatement: PostgresPreparedStatement {
    /// Its name on each connection, stated: postgres-nio's default, `String(reflecting:)` of
    /// the type, was computed at every execution (it showed in perf profiles at a steady load).
    static let name = "herald_active_devices"
    static let sql = """
        SELECT user_id, token, environment, platform, fcm_target, \(webPushKeys) FROM push.device_tokens
        WHERE \(condition(apnsTopic: "$1", fcmPackage: "$2", userIDs: "$3", webPushApp: "$4"))
        """

    /// A subscription's keys as one text column, `p256dh auth [vapid key]` (base64url has no
    /// space); NULL for every other row.
    static let webPushKeys = "CASE WHEN platform = 'webpush' THEN concat_ws(' ', webpush_p256dh, webpush_auth, webpush_vapid_key) END"

    /// Which rows are the devices: these parameters' numbers name the bundle ID, the package,
    /// the user IDs and the web app.
    static func condition(apnsTopic: String, fcmPackage: String, userIDs: String, webPushApp: String) -> String {
        """
        user_id = ANY(\(userIDs)) AND unregistered_at IS NULL
          AND (((topic || '') = \(apnsTopic)::text AND platform = 'apns') OR ((topic || '') = \(fcmPackage)::text AND platform = 'fcm')
               OR ((topic || '') = \(webPushApp)::text AND platform = 'webpush'))
        """
    }
    typealias Row = (String, String, String, String, String?, String?)

    var apnsTopic: String?
    var fcmPackage: String?
    var webPushApp: String?
    var userIDs: [String]

    func makeBindings() throws -> PostgresBindings {
        var bindings = PostgresBindings(capacity: 4)
        appendBindings(to: &bindings)
        return bindings
    }

    /// The bundle ID, the package, the user IDs and the web app, in the order
    /// ``condition(apnsTopic:fcmPackage:userIDs:webPushApp:)`` numbers them.
    func appendBindings(to bindings: inout PostgresBindings) {
        bindings.append(apnsTopic)
        bindings.append(fcmPackage)
        bindings.append(userIDs)
        bindings.append(webPushApp)
    }

    func decodeRow(_ row: PostgresRow) throws -> Row {
        try row.decode(Row.self)
    }
}
