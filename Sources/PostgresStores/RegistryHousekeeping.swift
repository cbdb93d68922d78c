import PushCore
import APNSCore
package import PushStores
package import Logging
package import Metrics
import PostgresNIO
import ServiceLifecycle

/// What the periodic housekeeping keeps and deletes, and how often it runs.
package struct HousekeepingConfiguration: Sendable, Hashable {
    /// Time between passes; the first pass runs at start-up. Default: one hour.
    package var interval: Duration = .seconds(3600)
    /// A day partition of the delivery ledger is dropped once every record it holds is older than
    /// this (by the Kafka record's timestamp). Keep it at least push.requests' retention
    /// (`retention.ms`), the longest a record can wait to be redelivered. Default:
    /// ``LedgerEvent/defaultRetention``.
    package var ledgerRetention: Duration = LedgerEvent.defaultRetention
    /// When set, tokens unregistered longer ago than this are deleted. Keep it above push.tokens'
    /// retention: a purged row no longer stops a replayed older registration. Default: nil (kept).
    package var unregisteredTokenRetention: Duration?
    /// Tombstones (unregistrations that arrived before their token's row) older than this are
    /// deleted, by their unregistration time. Default: 30 days.
    package var tombstoneRetention: Duration = .seconds(30 * 86_400)
    /// Whether the service's passes keep the ledger's partitions (create, drop, expire the
    /// default partition's rows). Off where the service's database role may not change the schema:
    /// `herald migrate`, run on a schedule by the schema owner's role, keeps them. Default: on.
    package var maintainsPartitions = true

    package init() {}
}

/// What housekeeping runs: the ledger's partitions, and deletions batched so no single
/// statement holds locks for long.
package protocol RegistryHousekeepingStore: Sendable {
    /// Brings the delivery ledger's day partitions to `window` and drops the unpartitioned
    /// ledger once its newest row is older than `unpartitionedBefore` (milliseconds since 1970).
    func maintainLedger(window: LedgerWindow, unpartitionedBefore: Int64) async throws -> LedgerMaintenance
    /// Deletes tokens unregistered before `date`; returns how many.
    func purgeUnregisteredTokens(unregisteredBefore date: Timestamp) async throws -> Int
    /// Applies tombstones whose token now has a row (written directly by an app API) to that
    /// row with the ordering rule, and deletes them; returns how many rows they unregistered.
    func applyPendingTombstones() async throws -> Int
    /// Deletes tombstones of unregistrations before `date`; returns how many.
    func pruneTombstones(unregisteredBefore date: Timestamp) async throws -> Int
}

/// The counts of one housekeeping pass.
package struct HousekeepingReport: Sendable, Hashable {
    package var ledger = LedgerMaintenance()
    package var tokensPurged = 0
    package var tombstonesApplied = 0
    package var tombstonesPruned = 0

    package init() {}
}

/// Periodic clean-up inside the service: keeps the delivery ledger's day partitions (creating
/// days ahead, dropping expired ones), purges tokens unregistered long ago (when configured) and
/// settles tombstones.
///
/// The ledger's partitions are changed by one instance at a time (an advisory lock); every
/// other step is an idempotent delete or an ordering-rule update, so instances running passes
/// at the same time only repeat each other's work. A failed pass is logged, counted
/// (`herald_housekeeping_passes_total{result="failed"}`) and retried at the next interval.
package final class RegistryHousekeeping: Service, Sendable {
    private let configuration: HousekeepingConfiguration
    private let store: any RegistryHousekeepingStore
    private let now: @Sendable () -> Timestamp
    private let logger: Logger
    /// Passes that succeeded and that failed.
    private let passes: (succeeded: Counter, failed: Counter)

    /// - Parameter now: the wall clock the cut-offs are computed from (injectable for tests).
    package init(
        configuration: HousekeepingConfiguration,
        store: any RegistryHousekeepingStore,
        now: @escaping @Sendable () -> Timestamp = { Timestamp(microsecondsSince1970: WallClock.microsecondsSince1970()) },
        metricsFactory: any MetricsFactory = MetricsSystem.factory,
        logger: Logger
    ) {
        self.configuration = configuration
        self.store = store
        self.now = now
        self.logger = logger
        func passes(_ result: String) -> Counter {
            Counter(label: "herald_housekeeping_passes_total", dimensions: [("result", result)], factory: metricsFactory)
        }
        self.passes = (passes("succeeded"), passes("failed"))
    }

    /// Runs a pass now and then every `interval`, until graceful shutdown or cancellation.
    package func run() async throws {
        await cancelWhenGracefulShutdown {
            while !Task.isCancelled {
                do {
                    let report = try await self.runPass()
                    self.passes.succeeded.increment()
                    self.logger.info(
                        "housekeeping pass",
                        metadata: [
                            "push.housekeeping.ledger_partitions_created": "\(report.ledger.partitionsCreated)",
                            "push.housekeeping.ledger_partitions_dropped": "\(report.ledger.partitionsDropped)",
                            "push.housekeeping.ledger_default_rebuilt": "\(report.ledger.defaultRebuilt)",
                            "push.housekeeping.unpartitioned_ledger_dropped": "\(report.ledger.unpartitionedDropped)",
                            "push.housekeeping.tokens_purged": "\(report.tokensPurged)",
                            "push.housekeeping.tombstones_applied": "\(report.tombstonesApplied)",
                            "push.housekeeping.tombstones_pruned": "\(report.tombstonesPruned)",
                        ]
                    )
                } catch  where Task.isCancelled {
                    return
                } catch {
                    self.passes.failed.increment()
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

    /// Brings the delivery ledger's partitions to the retention window at `date` (by default
    /// now); `herald migrate` runs it after the migrations so every day has its partition
    /// before the first write.
    package func maintainLedger(at time: Timestamp? = nil) async throws -> LedgerMaintenance {
        let nowMilliseconds = (time ?? now()).millisecondsSince1970
        return try await store.maintainLedger(
            window: LedgerWindow(nowMilliseconds: nowMilliseconds, retention: configuration.ledgerRetention),
            unpartitionedBefore: nowMilliseconds - configuration.ledgerRetention.wholeMilliseconds
        )
    }

    /// One pass: every step once, cut-offs taken from the clock at its start.
    package func runPass() async throws -> HousekeepingReport {
        let start = now()
        var report = HousekeepingReport()
        if configuration.maintainsPartitions { report.ledger = try await maintainLedger(at: start) }
        report.tombstonesApplied = try await store.applyPendingTombstones()
        report.tombstonesPruned = try await store.pruneTombstones(
            unregisteredBefore: start.before(configuration.tombstoneRetention)
        )
        if let retention = configuration.unregisteredTokenRetention {
            report.tokensPurged = try await store.purgeUnregisteredTokens(
                unregisteredBefore: start.before(retention)
            )
        }
        return report
    }
}

extension Timestamp {
    /// The instant `duration` earlier, in whole microseconds.
    fileprivate func before(_ duration: Duration) -> Timestamp {
        Timestamp(microsecondsSince1970: microsecondsSince1970 - duration.wholeMilliseconds * 1000)
    }
}

extension PostgresStore: RegistryHousekeepingStore {
    package func purgeUnregisteredTokens(unregisteredBefore date: Timestamp) async throws -> Int {
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

    package func pruneTombstones(unregisteredBefore date: Timestamp) async throws -> Int {
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
