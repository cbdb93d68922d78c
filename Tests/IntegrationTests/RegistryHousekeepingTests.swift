import APNSCore
import PostgresStores
import PushStores
import Foundation
import HeraldService
import Logging
import PostgresNIO
import PushPipeline
import ServiceLifecycle
import Testing

/// Housekeeping on the real PostgreSQL. These tests delete by age across the whole database, so
/// they run in the serialized registry suite, and each uses dates no other test writes.
extension TokenRegistryTests {
    static let year2001 = Timestamp(millisecondsSince1970: 978_307_200_000)
    static let year2001DayBefore = Timestamp(millisecondsSince1970: 978_307_200_000 - 86_400_000)
    static let year2002 = Timestamp(millisecondsSince1970: 1_009_843_200_000)
    static let year2003 = Timestamp(millisecondsSince1970: 1_041_379_200_000)

    /// An outcome of `eventID` in the ledger day `day` (days since 1970).
    static func ledgerOutcome(
        _ eventID: String,
        day: Int32,
        completedOnDay: Int32? = nil,
        token: String = TestDevice.randomToken()
    ) -> RecordedDelivery {
        RecordedDelivery(
            event: LedgerEvent(eventID: eventID, topic: "com.example.shop", day: day),
            target: LedgerTarget(.apnsDevice, token),
            userID: "u-1",
            outcome: .send(
                RecordedDelivery.SendOutcome(
                    status: .delivered,
                    environment: .sandbox,
                    apnsStatus: 200,
                    reason: nil,
                    attempts: 2,
                    latencyMilliseconds: 41,
                    completedAtMilliseconds: Int64(completedOnDay ?? day) * 86_400_000 + 5
                )
            )
        )
    }

    /// Partitions on a database of their own (days of 1997; 10,000 is 1997-05-19): outcomes of
    /// days without a partition wait in the default one and move into their day when it is
    /// created; a day before the window is dropped whole, and only its outcomes are gone.
    @Test func ledgerMaintenanceCreatesTheWindowDropsExpiredDaysAndEmptiesTheDefaultPartition() async throws {
        try await RegistryDatabase.withScratchDatabase { store, database in
            let early = Self.ledgerOutcome("early", day: 10_000)
            let late = Self.ledgerOutcome("late", day: 10_001)
            let ahead = Self.ledgerOutcome("ahead", day: 10_010)
            let expired = Self.ledgerOutcome("expired", day: 9_000)
            let all = [early, late, ahead, expired]
            #expect(try await store.record(all.map { ($0, nil) }) == all)
            #expect(try await database.partitions(of: all) == ["push.delivery_ledger_default"])

            var report = try await store.maintainLedger(window: LedgerWindow(oldestDay: 10_000, newestDay: 10_002), unpartitionedBefore: 0)
            #expect(report.defaultRebuilt && report.partitionsCreated == 3 && report.partitionsDropped == 0)
            #expect(try await database.partitions(of: [early]) == ["push.delivery_ledger_19970519"])
            #expect(try await database.partitions(of: [late]) == ["push.delivery_ledger_19970520"])
            #expect(try await database.partitions(of: [ahead]) == ["push.delivery_ledger_default"], "beyond the window: stays")
            var found = try await store.recordedDeliveries(of: all.map(\.event))
            #expect(found[early.event]?[early.target] == early && found[late.event]?[late.target] == late && found[ahead.event]?[ahead.target] == ahead)
            #expect(found[expired.event] == nil, "older than the window: not copied out of the default partition")
            var otherApp = late.event
            otherApp.topic = "com.example.other"
            #expect(try await store.recordedDeliveries(of: [otherApp]).isEmpty, "the same event ID in another app is another event")

            report = try await store.maintainLedger(window: LedgerWindow(oldestDay: 10_001, newestDay: 10_003), unpartitionedBefore: 0)
            #expect(!report.defaultRebuilt && report.partitionsCreated == 1 && report.partitionsDropped == 1)
            found = try await store.recordedDeliveries(of: all.map(\.event))
            #expect(found[early.event] == nil && found[late.event]?[late.target] == late && found[ahead.event]?[ahead.target] == ahead)
            let partitions = try await database.query(
                "SELECT count(*) FROM pg_inherits WHERE inhparent = 'push.delivery_ledger'::regclass",
                logger: database.sqlLogger
            ).collect().map { try $0.decode(Int.self) }
            #expect(partitions == [4], "10,001 to 10,003 and the default partition")
        }
    }

    /// Finding 5: the outcome of a record older than the retention (a backlog read late, a
    /// redelivery after a crash) waits in the default partition; a maintenance pass (the first
    /// runs at start-up) keeps it until the outcome itself is older than the retention, so the
    /// redelivery finds it instead of pushing again. Outcomes dated in the future expire too.
    @Test func anOldRecordsOutcomeRecordedLatelySurvivesMaintenanceAndExpiresByItsOwnAge() async throws {
        try await RegistryDatabase.withScratchDatabase { store, database in
            let backlog = Self.ledgerOutcome("backlog", day: 9_000, completedOnDay: 10_001)
            let future = Self.ledgerOutcome("future", day: 20_000, completedOnDay: 9_999)
            #expect(try await store.record([(backlog, nil), (future, nil)]) == [backlog, future])
            let report = try await store.maintainLedger(window: LedgerWindow(oldestDay: 10_000, newestDay: 10_002), unpartitionedBefore: 0)
            #expect(!report.defaultRebuilt, "nothing in the default partition belongs to a day created now")
            #expect(report.defaultRowsExpired == 1)
            let found = try await store.recordedDeliveries(of: [backlog.event, future.event])
            #expect(found[backlog.event]?[backlog.target] == backlog, "recorded on day 10,001: not expired")
            #expect(found[future.event] == nil, "completed before the window: expired, whatever its record's day")
            #expect(try await database.partitions(of: [backlog]) == ["push.delivery_ledger_default"])
        }
    }

    /// Finding 7: while a partition DDL waits for a lock (here behind a long reader), every
    /// ledger statement queues behind it. Its wait ends after 100 ms and it tries again after a
    /// pause, so a lookup meanwhile waits about that long, not the seconds the reader runs; the
    /// pass still completes once the reader is done.
    @Test func aPartitionDDLWaitingForALockHoldsLedgerLookupsOnlyBriefly() async throws {
        try await RegistryDatabase.withScratchDatabase { store, database in
            let outcome = Self.ledgerOutcome("during-ddl", day: 10_000, completedOnDay: 10_000)
            _ = try await store.record([(outcome, nil)])
            _ = try await store.maintainLedger(window: LedgerWindow(oldestDay: 10_000, newestDay: 10_000), unpartitionedBefore: 0)
            let (held, holding) = AsyncStream.makeStream(of: Void.self)
            let worst = try await withThrowingTaskGroup(of: Duration?.self) { group in
                group.addTask {
                    try await database.withConnection { connection in
                        // A long reader: ACCESS SHARE on the ledger until it commits, 3 s later.
                        try await connection.query("BEGIN", logger: database.sqlLogger)
                        try await connection.query("SELECT count(*) FROM push.delivery_ledger", logger: database.sqlLogger)
                        holding.yield()
                        try await Task.sleep(for: .seconds(3))
                        try await connection.query("COMMIT", logger: database.sqlLogger)
                    }
                    return nil
                }
                for await _ in held { break }
                group.addTask {
                    // Drops day 10,000 and creates 10,001 and 10,002: each DDL waits for the reader.
                    let report = try await store.maintainLedger(window: LedgerWindow(oldestDay: 10_001, newestDay: 10_002), unpartitionedBefore: 0)
                    #expect(report.partitionsDropped == 1 && report.partitionsCreated == 2)
                    return nil
                }
                group.addTask {
                    try await Task.sleep(for: .milliseconds(300))
                    var worst = Duration.zero
                    for _ in 0..<8 {
                        let started = ContinuousClock.now
                        _ = try await store.recordedDeliveries(of: [outcome.event])
                        worst = max(worst, started.duration(to: .now))
                        try await Task.sleep(for: .milliseconds(150))
                    }
                    return worst
                }
                return try await group.reduce(into: Duration.zero) { worst, lookups in worst = max(worst, lookups ?? .zero) }
            }
            #expect(worst < .milliseconds(700), "a lookup waited \(worst) behind a waiting DDL")
        }
    }

    /// A pass that fails midway (here the default partition's rebuild, whose temporary name is
    /// taken) releases the maintenance lock: its pooled connection would otherwise keep it, and
    /// every instance would skip maintenance from then on. The next pass does the work.
    @Test func aMaintenancePassThatFailsReleasesItsLockForTheNextPass() async throws {
        try await RegistryDatabase.withScratchDatabase { store, database in
            let waiting = Self.ledgerOutcome("waiting", day: 10_000)
            _ = try await store.record([(waiting, nil)])
            try await database.query("CREATE TABLE push.delivery_ledger_rebuilt_default (taken integer)", logger: database.sqlLogger)
            let window = LedgerWindow(oldestDay: 10_000, newestDay: 10_000)
            await #expect(throws: (any Error).self) {
                try await store.maintainLedger(window: window, unpartitionedBefore: 0)
            }
            // Any session's hold of lock 7215300412 (classid its high 32 bits, objid its low ones),
            // whichever pooled connection keeps it.
            let holders = try await database.query(
                """
                SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND classid = 1 AND objid = 2920333116
                AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
                """,
                logger: database.sqlLogger
            ).decode(Int.self).first(where: { _ in true })
            #expect(holders == 0, "the failed pass left the maintenance lock held")
            try await database.query("DROP TABLE push.delivery_ledger_rebuilt_default", logger: database.sqlLogger)
            let report = try await store.maintainLedger(window: window, unpartitionedBefore: 0)
            #expect(!report.skipped && report.defaultRebuilt)
            #expect(try await database.partitions(of: [waiting]) == ["push.delivery_ledger_19970519"])
        }
    }

    /// The ledger before migration 5 is read until its newest row is older than the retention,
    /// then dropped; an instance that finds it gone reads the partitioned ledger alone.
    @Test func theUnpartitionedLedgerIsReadUntilItExpiresAndThenDropped() async throws {
        try await RegistryDatabase.withScratchDatabase { store, database in
            let result = #"{"event_id":"before-5","status":"unregistered"}"#
            let unregistered = #"{"token":"aa","event_id":"before-5"}"#
            try await database.query(
                """
                INSERT INTO push.deliveries (event_id, token, topic, user_id, result, unregistered_event, recorded_at)
                VALUES ('before-5', 'aa', 'com.example', 'u-1', \(result), \(unregistered), '2026-11-20T10:00:00Z')
                """,
                logger: database.sqlLogger
            )
            let event = LedgerEvent(eventID: "before-5", topic: "com.example", day: 20_777)
            let recordedAt: Int64 = 1_795_168_800_000  // 2026-11-20T10:00:00Z
            let window = LedgerWindow(oldestDay: 20_770, newestDay: 20_780)
            var report = try await store.maintainLedger(window: window, unpartitionedBefore: recordedAt)
            #expect(!report.unpartitionedDropped, "its newest row is not older than the cut-off")
            let found = try await store.recordedDeliveries(of: [event])
            #expect(
                found[event]?[LedgerTarget(.apnsDevice, "aa")]?.outcome == .message(result: Array(result.utf8), unregisteredEvent: Array(unregistered.utf8)))

            // An upgraded database (migration 5 applied after migration 2, just now): the old
            // version may still be running, so even an expired table stays until migration 5 is
            // older than the cut-off.
            try await database.query(
                "UPDATE push.schema_migrations SET applied_at = now() + interval '1 second' WHERE version = 5",
                logger: database.sqlLogger
            )
            report = try await store.maintainLedger(window: window, unpartitionedBefore: recordedAt + 1)
            #expect(!report.unpartitionedDropped, "a rollout from the previous version may still be under way")
            try await database.query(
                "UPDATE push.schema_migrations SET applied_at = '2026-11-20T09:00:00Z' WHERE version = 5",
                logger: database.sqlLogger
            )

            let otherInstance = PostgresStore(client: database, logger: Logger(label: "test.registry"))
            report = try await store.maintainLedger(window: window, unpartitionedBefore: recordedAt + 1)
            #expect(report.unpartitionedDropped)
            #expect(try await store.recordedDeliveries(of: [event]).isEmpty)
            #expect(try await otherInstance.recordedDeliveries(of: [event]).isEmpty, "gone under another instance: no error")
        }
    }

    @Test func tokenPurgeDeletesOnlyTokensUnregisteredBeforeTheCutOff() async throws {
        try await RegistryDatabase.withStore { store, database in
            let purged = TestDevice.randomToken()
            let recentlyUnregistered = TestDevice.randomToken()
            let activeSinceLongAgo = TestDevice.randomToken()
            let registeredAgain = TestDevice.randomToken()
            try await database.insertRow(topic, purged, user: "u-1", registeredAt: Self.year2001DayBefore, unregisteredAt: Self.year2001)
            try await database.insertRow(topic, recentlyUnregistered, user: "u-1", registeredAt: Self.year2001, unregisteredAt: Self.year2003)
            try await database.insertRow(topic, activeSinceLongAgo, user: "u-1", registeredAt: Self.year2001)
            try await database.insertRow(topic, registeredAgain, user: "u-1", registeredAt: Self.year2001, unregisteredAt: Self.year2001)
            try await store.apply(register(registeredAgain, at: t(0)))

            let count = try await store.purgeUnregisteredTokens(unregisteredBefore: Self.year2002)
            #expect(count >= 1)
            #expect(try await database.row(topic, purged) == nil)
            #expect(try await database.row(topic, recentlyUnregistered)?.unregisteredAt == Self.year2003)
            #expect(try await database.row(topic, activeSinceLongAgo) != nil)
            #expect(try await database.row(topic, registeredAgain)?.unregisteredAt == nil)
        }
    }

    @Test func tombstonePruningDeletesOnlyOldTombstones() async throws {
        try await RegistryDatabase.withStore { store, database in
            let old = TestDevice.randomToken()
            let recent = TestDevice.randomToken()
            #expect(try await !store.markUnregistered(topic: topic, token: old, at: Self.year2001))
            #expect(try await !store.markUnregistered(topic: topic, token: recent, at: Self.year2003))
            let count = try await store.pruneTombstones(unregisteredBefore: Self.year2002)
            #expect(count >= 1)
            #expect(try await database.tombstone(topic, old) == nil)
            #expect(try await database.tombstone(topic, recent) == Self.year2003)
        }
    }

    /// A tombstone whose token then got a row from an app API is settled by housekeeping even
    /// when Herald never writes that token again.
    @Test func housekeepingAppliesTombstonesToRowsAppAPIsInserted() async throws {
        try await RegistryDatabase.withStore { store, database in
            let overtaken = TestDevice.randomToken()
            let newer = TestDevice.randomToken()
            #expect(try await !store.apply(unregister(overtaken, at: t(20))))
            #expect(try await !store.apply(unregister(newer, at: t(20))))
            try await database.insertRow(topic, overtaken, user: "u-1", registeredAt: t(10))
            try await database.insertRow(topic, newer, user: "u-1", registeredAt: t(30))

            let applied = try await store.applyPendingTombstones()
            // The overtaken row at least (pending tombstones of other tests may add to the count).
            #expect(applied >= 1)
            #expect(try await database.row(topic, overtaken)?.unregisteredAt == t(20))
            #expect(try await database.row(topic, newer)?.unregisteredAt == nil)
            #expect(try await database.tombstone(topic, overtaken) == nil)
            #expect(try await database.tombstone(topic, newer) == nil)
            let active = try await store.activeTokens(topic: topic, userIDs: ["u-1"], environment: nil)
            #expect(active["u-1"]?.map(\.token) == [newer])
        }
    }

    /// The service runs its passes periodically inside a service group and stops on shutdown.
    @Test func housekeepingServicePrunesPeriodicallyUntilShutdown() async throws {
        try await RegistryDatabase.withStore { store, database in
            var configuration = HousekeepingConfiguration()
            configuration.interval = .milliseconds(200)
            configuration.unregisteredTokenRetention = .seconds(86_400 * 365 * 20)
            let housekeeping = RegistryHousekeeping(configuration: configuration, store: store, logger: Logger(label: "test"))
            let group = ServiceGroup(services: [housekeeping], logger: Logger(label: "test"))
            try await withRunningServices(group) {
                // Rows that become due while the service runs are deleted by a later pass.
                try await Task.sleep(for: .milliseconds(300))
                let token = TestDevice.randomToken()
                let kept = TestDevice.randomToken()
                try await database.insertRow(topic, token, user: "u-1", registeredAt: Self.year2001, unregisteredAt: Self.year2001)
                try await database.insertRow(topic, kept, user: "u-1", registeredAt: t(0), unregisteredAt: t(1))
                let clock = ContinuousClock()
                let deadline = clock.now + .seconds(10)
                while try await database.row(topic, token) != nil, clock.now < deadline {
                    try await Task.sleep(for: .milliseconds(50))
                }
                #expect(try await database.row(topic, token) == nil)
                #expect(try await database.row(topic, kept) != nil)
            }
        }
    }

    /// `herald run`'s service group includes housekeeping, configured by HERALD_* variables.
    @Test func heraldRunsHousekeepingFromItsConfiguration() async throws {
        let testbed = try HeraldTestbed(partitions: 1)
        try await testbed.withMocks {
            var environment = try await testbed.heraldEnvironment(group: "herald-\(UUID().uuidString)")
            environment["HERALD_HOUSEKEEPING_INTERVAL_S"] = "1"
            environment["HERALD_TOKEN_PURGE_DAYS"] = "7300"
            environment["HERALD_POSTGRES_POOL_SIZE"] = "4"
            let configuration = try await HeraldConfiguration(environment: environment)
            try await HeraldApplication.migrate(configuration: configuration, logger: testbed.logger)
            try await RegistryDatabase.withStore { _, database in
                let purged = TestDevice.randomToken()
                let kept = TestDevice.randomToken()
                try await database.insertRow(topic, purged, user: "u-1", registeredAt: Self.year2001, unregisteredAt: Self.year2001)
                try await database.insertRow(topic, kept, user: "u-1", registeredAt: t(0), unregisteredAt: t(1))
                let herald = try HeraldApplication.makeServiceGroup(configuration: configuration, logger: testbed.logger)
                try await withRunningServices(herald) {
                    let clock = ContinuousClock()
                    let deadline = clock.now + .seconds(30)
                    while try await database.row(topic, purged) != nil, clock.now < deadline {
                        try await Task.sleep(for: .milliseconds(100))
                    }
                }
                #expect(try await database.row(topic, purged) == nil)
                #expect(try await database.row(topic, kept) != nil)
            }
        }
    }
}

@Suite struct HousekeepingConfigurationTests {
    @Test func defaults() async throws {
        let configuration = try await HeraldConfiguration(environment: [:])
        #expect(configuration.postgresPoolSize == 20)
        #expect(configuration.pipeline.maxConcurrentSends == 2000)
        #expect(configuration.pipeline.maxInFlightMessages == 4096)
        #expect(configuration.pipeline.pollBatchSize == 256)
        #expect(configuration.pipeline.maxOutcomesPerLedgerWrite == 500)
        #expect(configuration.housekeeping == HousekeepingConfiguration())
        #expect(configuration.housekeeping.interval == .seconds(3600))
        #expect(configuration.housekeeping.ledgerRetention == .seconds(168 * 3600))
        #expect(configuration.housekeeping.unregisteredTokenRetention == nil)
        #expect(configuration.housekeeping.tombstoneRetention == .seconds(30 * 86_400))
    }

    @Test func readsEveryKey() async throws {
        let configuration = try await HeraldConfiguration(environment: [
            "HERALD_POSTGRES_POOL_SIZE": "7",
            "HERALD_MAX_CONCURRENT_SENDS": "250",
            "HERALD_HOUSEKEEPING_INTERVAL_S": "60",
            "HERALD_LEDGER_RETENTION_HOURS": "24",
            "HERALD_TOKEN_PURGE_DAYS": "90",
            "HERALD_TOKEN_TOMBSTONE_DAYS": "14",
        ])
        #expect(configuration.postgresPoolSize == 7)
        #expect(configuration.pipeline.maxConcurrentSends == 250)
        #expect(configuration.housekeeping.interval == .seconds(60))
        #expect(configuration.housekeeping.ledgerRetention == .seconds(24 * 3600))
        #expect(configuration.housekeeping.unregisteredTokenRetention == .seconds(90 * 86_400))
        #expect(configuration.housekeeping.tombstoneRetention == .seconds(14 * 86_400))
        #expect(try await HeraldConfiguration(environment: ["HERALD_TOKEN_PURGE_DAYS": "0"]).housekeeping.unregisteredTokenRetention == nil)
    }

    @Test(arguments: [
        ("HERALD_POSTGRES_POOL_SIZE", "0"),
        ("HERALD_MAX_CONCURRENT_SENDS", "0"),
        ("HERALD_MAX_CONCURRENT_SENDS", "100001"),
        ("HERALD_MAX_IN_FLIGHT_MESSAGES", "0"),
        ("HERALD_POLL_BATCH_SIZE", "0"),
        ("HERALD_LEDGER_BATCH_SIZE", "10001"),
        ("HERALD_LEDGER_RETENTION_HOURS", "a week"),
        ("HERALD_TOKEN_PURGE_DAYS", "-1"),
        ("HERALD_HOUSEKEEPING_INTERVAL_S", "0"),
        ("HERALD_TOKEN_TOMBSTONE_DAYS", "0"),
    ])
    func rejectsValuesOutOfRange(key: String, value: String) async {
        await #expect(throws: ConfigurationError.self) { _ = try await HeraldConfiguration(environment: [key: value]) }
    }
}

extension PostgresClient {
    /// The partitions holding these outcomes' rows, sorted, each named once.
    func partitions(of deliveries: [RecordedDelivery]) async throws -> [String] {
        let rows = try await query(
            """
            SELECT DISTINCT tableoid::regclass::text FROM push.delivery_ledger
            WHERE event_key = ANY(ARRAY(SELECT md5(e)::uuid FROM unnest(\(deliveries.map { "\($0.event.topic)/\($0.event.eventID)" })::text[]) AS e))
            ORDER BY 1
            """,
            logger: sqlLogger
        )
        return try await rows.collect().map { try $0.decode(String.self) }
    }
}
