package import Foundation
package import Logging
import PostgresNIO
import ServiceLifecycle

/// What the periodic housekeeping deletes, and how often it runs.
package struct HousekeepingConfiguration: Sendable, Hashable {
    /// Time between passes; the first pass runs at start-up. Default: one hour.
    package var interval: Duration = .seconds(3600)
    /// Delivery-ledger outcomes recorded longer ago than this are deleted. Keep it above the
    /// time a Kafka message can wait to be redelivered. Default: 168 hours.
    package var ledgerRetention: Duration = .seconds(168 * 3600)
    /// When set, tokens unregistered longer ago than this are deleted. Keep it above push.tokens'
    /// retention: a purged row no longer stops a replayed older registration. Default: nil (kept).
    package var unregisteredTokenRetention: Duration?
    /// Tombstones (unregistrations that arrived before their token's row) older than this are
    /// deleted, by their unregistration time. Default: 30 days.
    package var tombstoneRetention: Duration = .seconds(30 * 86_400)

    package init() {}
}

/// The deletions housekeeping runs, each batched so no single statement holds locks for long.
package protocol RegistryHousekeepingStore: Sendable {
    /// Deletes ledger outcomes recorded before `date`; returns how many.
    func pruneDeliveries(recordedBefore date: Date) async throws -> Int
    /// Deletes tokens unregistered before `date`; returns how many.
    func purgeUnregisteredTokens(unregisteredBefore date: Date) async throws -> Int
    /// Applies tombstones whose token now has a row (written directly by an app API) to that
    /// row with the ordering rule, and deletes them; returns how many rows they unregistered.
    func applyPendingTombstones() async throws -> Int
    /// Deletes tombstones of unregistrations before `date`; returns how many.
    func pruneTombstones(unregisteredBefore date: Date) async throws -> Int
}

/// The counts of one housekeeping pass.
package struct HousekeepingReport: Sendable, Hashable {
    package var deliveriesPruned = 0
    package var tokensPurged = 0
    package var tombstonesApplied = 0
    package var tombstonesPruned = 0

    package init() {}
}

/// Periodic clean-up inside the service: prunes the delivery ledger by age, purges tokens
/// unregistered long ago (when configured) and settles tombstones.
///
/// Every step is an idempotent delete or an ordering-rule update, so instances running passes
/// at the same time only repeat each other's work; no cross-instance lock is needed. A failed
/// pass is logged and retried at the next interval.
package final class RegistryHousekeeping: Service, Sendable {
    private let configuration: HousekeepingConfiguration
    private let store: any RegistryHousekeepingStore
    private let now: @Sendable () -> Date
    private let logger: Logger

    /// - Parameter now: the wall clock the cut-offs are computed from (injectable for tests).
    package init(
        configuration: HousekeepingConfiguration,
        store: any RegistryHousekeepingStore,
        now: @escaping @Sendable () -> Date = { Date() },
        logger: Logger
    ) {
        self.configuration = configuration
        self.store = store
        self.now = now
        self.logger = logger
    }

    /// Runs a pass now and then every `interval`, until graceful shutdown or cancellation.
    package func run() async throws {
        await cancelWhenGracefulShutdown {
            while !Task.isCancelled {
                do {
                    let report = try await self.runPass()
                    self.logger.info(
                        "housekeeping pass",
                        metadata: [
                            "push.housekeeping.deliveries_pruned": "\(report.deliveriesPruned)",
                            "push.housekeeping.tokens_purged": "\(report.tokensPurged)",
                            "push.housekeeping.tombstones_applied": "\(report.tombstonesApplied)",
                            "push.housekeeping.tombstones_pruned": "\(report.tombstonesPruned)",
                        ]
                    )
                } catch  where Task.isCancelled {
                    return
                } catch {
                    self.logger.warning("housekeeping pass failed", metadata: ["error": "\(error)"])
                }
                do {
                    try await Task.sleep(for: self.configuration.interval)
                } catch {
                    return
                }
            }
        }
    }

    /// One pass: every deletion once, cut-offs taken from the clock at its start.
    package func runPass() async throws -> HousekeepingReport {
        let start = now()
        var report = HousekeepingReport()
        report.deliveriesPruned = try await store.pruneDeliveries(
            recordedBefore: start.addingTimeInterval(-configuration.ledgerRetention.seconds)
        )
        report.tombstonesApplied = try await store.applyPendingTombstones()
        report.tombstonesPruned = try await store.pruneTombstones(
            unregisteredBefore: start.addingTimeInterval(-configuration.tombstoneRetention.seconds)
        )
        if let retention = configuration.unregisteredTokenRetention {
            report.tokensPurged = try await store.purgeUnregisteredTokens(
                unregisteredBefore: start.addingTimeInterval(-retention.seconds)
            )
        }
        return report
    }
}

extension Duration {
    fileprivate var seconds: TimeInterval {
        let (seconds, attoseconds) = components
        return TimeInterval(seconds) + TimeInterval(attoseconds) / 1e18
    }
}

extension PostgresDeviceTokenStore: RegistryHousekeepingStore {
    package func purgeUnregisteredTokens(unregisteredBefore date: Date) async throws -> Int {
        // The outer condition is checked again on a row changed meanwhile, so a token
        // registered again while the batch is deleted is kept.
        try await deleteInBatches { batchSize in
            """
            WITH deleted AS (
                DELETE FROM push.device_tokens WHERE (topic, token) IN (
                    SELECT topic, token FROM push.device_tokens WHERE unregistered_at < \(date) LIMIT \(batchSize))
                  AND unregistered_at < \(date)
                RETURNING 1
            )
            SELECT count(*) FROM deleted
            """
        }
    }

    package func applyPendingTombstones() async throws -> Int {
        // One statement: the delete and the update see the same rows, so no tombstone is
        // deleted without having been applied. A row changed meanwhile is checked again.
        let rows = try await client.query(
            """
            WITH pending AS (
                DELETE FROM push.token_tombstones AS t
                USING push.device_tokens AS d
                WHERE d.topic = t.topic AND d.token = t.token
                RETURNING t.topic, t.token, t.unregistered_at
            ), applied AS (
                UPDATE push.device_tokens AS d
                SET unregistered_at = p.unregistered_at, updated_at = now()
                FROM pending AS p
                WHERE d.topic = p.topic AND d.token = p.token
                  AND p.unregistered_at > d.registered_at
                  AND (d.unregistered_at IS NULL OR p.unregistered_at > d.unregistered_at)
                RETURNING 1
            )
            SELECT count(*) FROM applied
            """,
            logger: logger
        )
        return try await Self.count(rows)
    }

    package func pruneTombstones(unregisteredBefore date: Date) async throws -> Int {
        try await deleteInBatches { batchSize in
            """
            WITH deleted AS (
                DELETE FROM push.token_tombstones WHERE (topic, token) IN (
                    SELECT topic, token FROM push.token_tombstones WHERE unregistered_at < \(date) LIMIT \(batchSize))
                  AND unregistered_at < \(date)
                RETURNING 1
            )
            SELECT count(*) FROM deleted
            """
        }
    }

    /// Runs a counting delete of at most `batchSize` rows until a batch comes back short; small
    /// batches keep each statement's locks and WAL short. Returns the total.
    func deleteInBatches(batchSize: Int = 5000, _ query: (Int) -> PostgresQuery) async throws -> Int {
        var total = 0
        while true {
            let deleted = try await Self.count(try await client.query(query(batchSize), logger: logger))
            total += deleted
            if deleted < batchSize { return total }
        }
    }

    private static func count(_ rows: PostgresRowSequence) async throws -> Int {
        for try await count in rows.decode(Int.self) {
            return count
        }
        return 0
    }
}
