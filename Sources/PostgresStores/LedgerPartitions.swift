import PushCore
import APNSCore
import PushStores
import Logging
import PostgresNIO
import Synchronization

/// The days the partitioned ledger keeps at an instant: every day that may hold an outcome
/// younger than the retention, and a few ahead so that new days never start in the default
/// partition; and when an outcome kept in the default partition (a record dated outside the
/// days kept) expires.
package struct LedgerWindow: Sendable, Hashable {
    /// The first day kept: it holds the instant `retention` ago, so every earlier day is older.
    package var oldestDay: Int32
    /// The last day created ahead.
    package var newestDay: Int32
    /// Outcomes in the default partition completed before this instant (milliseconds since
    /// 1970) are expired: they are kept by when they were recorded, not by their record's day, so
    /// an outcome recorded lately for an old record survives until a redelivery can no longer come.
    package var expiredBeforeMilliseconds: Int64

    /// Days created ahead of today.
    package static let daysAhead: Int32 = 3

    /// A window whose default-partition outcomes expire at the start of `oldestDay`.
    package init(oldestDay: Int32, newestDay: Int32) {
        self.oldestDay = oldestDay
        self.newestDay = newestDay
        expiredBeforeMilliseconds = Int64(oldestDay) * 86_400_000
    }

    package init(nowMilliseconds: Int64, retention: Duration) {
        expiredBeforeMilliseconds = nowMilliseconds - retention.wholeMilliseconds
        oldestDay = LedgerEvent.day(ofMilliseconds: expiredBeforeMilliseconds)
        newestDay = LedgerEvent.day(ofMilliseconds: nowMilliseconds) + Self.daysAhead
    }
}

/// What one ledger maintenance pass changed.
package struct LedgerMaintenance: Sendable, Hashable {
    package var partitionsCreated = 0
    package var partitionsDropped = 0
    /// The default partition was rebuilt (it held rows of a day created now).
    package var defaultRebuilt = false
    /// Outcomes deleted from the default partition because they expired.
    package var defaultRowsExpired = 0
    /// `push.deliveries` (before migration 5) was dropped: its newest row had expired.
    package var unpartitionedDropped = false
    /// Another instance held the maintenance lock, so this pass changed nothing.
    package var skipped = false

    package init() {}
}

extension PostgresStore {
    /// Brings `push.delivery_ledger`'s partitions to `window`: drops every day before it,
    /// deletes the default partition's expired outcomes (by when they were completed), creates
    /// every missing day in it, and rebuilds the default partition only when it holds rows of a
    /// day created now. Drops `push.deliveries` once its newest row is older than
    /// `unpartitionedBefore` (milliseconds since 1970).
    ///
    /// One instance at a time (a session advisory lock; others skip the pass; a lock that cannot
    /// be released closes its connection, which releases it). Every DDL runs in a short
    /// transaction whose lock wait ends after 100 ms and is tried again after a pause, so the
    /// pipeline's statements never queue behind a waiting DDL for longer than that; the rebuild
    /// copy has a statement time limit.
    package func maintainLedger(window: LedgerWindow, unpartitionedBefore: Int64) async throws -> LedgerMaintenance {
        let logger = self.logger
        return try await client.withConnection { connection in
            var report = LedgerMaintenance()
            let locked = try await connection.query("SELECT pg_try_advisory_lock(7215300412)", logger: logger).decode(Bool.self)
            guard try await locked.first(where: { _ in true }) == true else {
                report.skipped = true
                return report
            }
            do {
                try await Self.maintain(window: window, unpartitionedBefore: unpartitionedBefore, report: &report, on: connection, logger: logger)
            } catch {
                await Self.releaseMaintenanceLock(on: connection, logger: logger)
                throw error
            }
            await Self.releaseMaintenanceLock(on: connection, logger: logger)
            if report.unpartitionedDropped { unpartitionedLedger.markDropped() }
            return report
        }
    }

    /// Releases the session's maintenance lock; when that fails, closes the connection, whose
    /// session end releases it: a pooled connection left holding it would make every instance
    /// skip maintenance until writes pile into the default partition.
    private static func releaseMaintenanceLock(on connection: PostgresConnection, logger: Logger) async {
        do {
            try await connection.query("SELECT pg_advisory_unlock(7215300412)", logger: logger)
        } catch {
            logger.warning("ledger maintenance lock not released; closing its connection", metadata: ["error": "\(error)"])
            try? await connection.close()
        }
    }

    private static func maintain(
        window: LedgerWindow,
        unpartitionedBefore: Int64,
        report: inout LedgerMaintenance,
        on connection: PostgresConnection,
        logger: Logger
    ) async throws {
        var existing: [Int32: String] = [:]
        for try await (name, day) in try await connection.query(
            """
            SELECT c.relname, substring(pg_get_expr(c.relpartbound, c.oid) FROM 'FROM \\(([-0-9]+)\\)')::integer
            FROM pg_inherits AS i JOIN pg_class AS c ON c.oid = i.inhrelid
            WHERE i.inhparent = 'push.delivery_ledger'::regclass
            """,
            logger: logger
        ).decode((String, Int32?).self) {
            if let day { existing[day] = name }
        }
        for (day, name) in existing.sorted(by: { $0.key < $1.key }) where day < window.oldestDay {
            try await inShortTransaction(on: connection, logger: logger) {
                try await connection.query(PostgresQuery(unsafeSQL: "DROP TABLE IF EXISTS push.\(name)"), logger: logger)
            }
            report.partitionsDropped += 1
        }
        try await inShortTransaction(on: connection, logger: logger) {
            // Row locks only: the pipeline's reads and writes go on.
            let expired = try await connection.query(
                """
                WITH expired AS (DELETE FROM push.delivery_ledger_default WHERE completed_at < \(window.expiredBeforeMilliseconds) RETURNING 1)
                SELECT count(*) FROM expired
                """,
                logger: logger
            )
            report.defaultRowsExpired = try await expired.decode(Int.self).first(where: { _ in true }) ?? 0
        }
        let missing = (window.oldestDay...window.newestDay).filter { existing[$0] == nil }
        // Only the days about to be created: a row of another day stays where it is.
        var defaultHoldsMissingDays = false
        if !missing.isEmpty {
            defaultHoldsMissingDays =
                try await connection.query(
                    "SELECT EXISTS (SELECT 1 FROM push.delivery_ledger_default WHERE day = ANY(\(missing)))",
                    logger: logger
                ).decode(Bool.self).first(where: { _ in true }) ?? false
        }
        if defaultHoldsMissingDays {
            try await inShortTransaction(on: connection, logger: logger) {
                try await connection.query("SET LOCAL statement_timeout = '30s'", logger: logger)
                try await rebuildDefault(creating: missing, on: connection, logger: logger)
            }
            report.defaultRebuilt = true
            report.partitionsCreated += missing.count
        } else {
            for day in missing {
                try await inShortTransaction(on: connection, logger: logger) {
                    try await createPartition(day, on: connection, logger: logger)
                }
                report.partitionsCreated += 1
            }
        }
        report.unpartitionedDropped = try await dropUnpartitionedIfExpired(before: unpartitionedBefore, on: connection, logger: logger)
    }

    /// Moves the default partition's rows into a new default partition or the day partitions
    /// created here, in one transaction: lookups see every row throughout.
    private static func rebuildDefault(
        creating days: [Int32],
        on connection: PostgresConnection,
        logger: Logger
    ) async throws {
        for statement in [
            "ALTER TABLE push.delivery_ledger DETACH PARTITION push.delivery_ledger_default",
            "ALTER TABLE push.delivery_ledger_default RENAME TO delivery_ledger_rebuilt_default",
            "CREATE TABLE push.delivery_ledger_default PARTITION OF push.delivery_ledger DEFAULT",
        ] {
            try await connection.query(PostgresQuery(unsafeSQL: statement), logger: logger)
        }
        for day in days { try await createPartition(day, on: connection, logger: logger) }
        try await connection.query(
            "INSERT INTO push.delivery_ledger SELECT * FROM push.delivery_ledger_rebuilt_default",
            logger: logger
        )
        try await connection.query("DROP TABLE push.delivery_ledger_rebuilt_default", logger: logger)
    }

    /// Creates the partition of one day, named after its date (`delivery_ledger_20261126`).
    private static func createPartition(_ day: Int32, on connection: PostgresConnection, logger: Logger) async throws {
        let names = try await connection.query(
            "SELECT to_char(date '1970-01-01' + \(day), '\"delivery_ledger_\"YYYYMMDD')",
            logger: logger
        ).decode(String.self)
        guard let name = try await names.first(where: { _ in true }) else { return }
        try await connection.query(
            PostgresQuery(
                unsafeSQL: "CREATE TABLE IF NOT EXISTS push.\(name) PARTITION OF push.delivery_ledger FOR VALUES FROM (\(day)) TO (\(day + 1))"
            ),
            logger: logger
        )
    }

    /// Drops `push.deliveries` when it exists and its newest row is older than `before`.
    private static func dropUnpartitionedIfExpired(before: Int64, on connection: PostgresConnection, logger: Logger) async throws -> Bool {
        let exists =
            try await connection.query("SELECT to_regclass('push.deliveries') IS NOT NULL", logger: logger)
            .decode(Bool.self).first(where: { _ in true }) ?? false
        guard exists else { return false }
        // Expired: its newest row (none when empty) is older than the cut-off, and no instance of
        // a version before migration 5 can still be writing it: migration 5 was applied before
        // the cut-off, or together with migration 2 (a new installation, where the table never
        // had such a writer). So `herald migrate` ahead of a rollout never drops it under the
        // instances still running.
        let cutoff = Timestamp(millisecondsSince1970: before)
        let expired =
            try await connection.query(
                """
                SELECT coalesce(max(recorded_at) < \(cutoff), true)
                    AND (SELECT m5.applied_at < \(cutoff) OR m5.applied_at = m2.applied_at
                         FROM push.schema_migrations AS m5, push.schema_migrations AS m2
                         WHERE m5.version = 5 AND m2.version = 2)
                FROM push.deliveries
                """,
                logger: logger
            ).decode(Bool?.self).first(where: { _ in true }) ?? nil
        guard expired == true else { return false }
        try await inShortTransaction(on: connection, logger: logger) {
            try await connection.query("DROP TABLE IF EXISTS push.deliveries", logger: logger)
        }
        return true
    }

    /// Runs `body` in a transaction whose lock waits end after 100 ms: while a DDL waits for
    /// its lock, every statement on the ledger queues behind it, so it waits briefly and is tried
    /// again after a pause that lets them through (up to 20 times, then the pass fails and the
    /// next one tries again).
    private static func inShortTransaction(
        on connection: PostgresConnection,
        logger: Logger,
        _ body: () async throws -> Void
    ) async throws {
        for attempt in 1... {
            try await connection.query("BEGIN", logger: logger)
            do {
                try await connection.query("SET LOCAL lock_timeout = '100ms'", logger: logger)
                try await body()
                try await connection.query("COMMIT", logger: logger)
                return
            } catch let error as PSQLError where error.serverInfo?[.sqlState] == "55P03" && attempt < 20 {
                _ = try? await connection.query("ROLLBACK", logger: logger)  // lock_not_available
                try await Task.sleep(for: .milliseconds(500))
            } catch {
                _ = try? await connection.query("ROLLBACK", logger: logger)
                throw error
            }
        }
    }
}

/// `push.deliveries`, the ledger before migration 5: read beside the partitioned ledger until
/// housekeeping drops it, so an upgrade keeps every outcome recorded before it.
package final class UnpartitionedLedger: Sendable {
    /// False once the table is known to be gone (dropped here, or missing on a read).
    private let present = Atomic(true)

    package init() {}

    func markDropped() {
        present.store(false, ordering: .relaxed)
    }

    /// The outcomes it holds for these events (none once it is gone).
    func recordedDeliveries(of events: [LedgerEvent], client: PostgresClient, logger: Logger) async throws -> [RecordedDelivery] {
        guard present.load(ordering: .relaxed) else { return [] }
        let eventsByID = Dictionary(grouping: events, by: \.eventID)
        var deliveries: [RecordedDelivery] = []
        do {
            let rows = try await client.query(
                """
                SELECT event_id, topic, token, user_id, result, unregistered_event FROM push.deliveries
                WHERE event_id = ANY(\(Array(eventsByID.keys)))
                """,
                logger: logger
            )
            for try await (eventID, topic, token, userID, result, unregisteredEvent) in rows.decode(
                (String, String, String, String, String, String?).self
            ) {
                // The table kept no record day: the outcome stands for each copy of its event.
                for event in eventsByID[eventID] ?? [] where event.topic == topic {
                    deliveries.append(
                        RecordedDelivery(
                            event: event,
                            // The table is older than FCM: an APNs token (hex) or a key of the
                            // pipeline's (`channel:…`, `channel-management`; never hex).
                            target: LedgerTarget(token.hasPrefix("channel") ? .other : .apnsDevice, token),
                            userID: userID,
                            outcome: .message(result: Array(result.utf8), unregisteredEvent: unregisteredEvent.map { Array($0.utf8) })
                        )
                    )
                }
            }
        } catch let error as PSQLError where error.serverInfo?[.sqlState] == "42P01" {
            markDropped()  // undefined_table: another instance dropped it
            return []
        }
        return deliveries
    }
}
