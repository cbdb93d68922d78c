import PostgresTokenStore
import DeviceTokenStore
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
    static let year2002 = Date(timeIntervalSince1970: 1_009_843_200)
    static let year2003 = Timestamp(millisecondsSince1970: 1_041_379_200_000)

    @Test func ledgerPruningDeletesOnlyOutcomesRecordedBeforeTheCutOff() async throws {
        try await RegistryDatabase.withStore { store, database in
            let old = (0..<3).map { "\(topic)-old-\($0)" }
            let fresh = (0..<2).map { "\(topic)-fresh-\($0)" }
            // Younger than Herald's default retention, so only this test prunes them.
            let now = Date()
            for eventID in old {
                try await database.insertDelivery(eventID: eventID, topic: topic, recordedAt: now.addingTimeInterval(-3 * 86_400))
            }
            for eventID in fresh {
                try await database.insertDelivery(eventID: eventID, topic: topic, recordedAt: now.addingTimeInterval(-1 * 86_400))
            }
            let pruned = try await store.pruneDeliveries(recordedBefore: now.addingTimeInterval(-2 * 86_400))
            #expect(pruned >= old.count)
            let left = try await store.recordedDeliveries(eventIDs: old + fresh)
            #expect(Set(left.keys) == Set(fresh))
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
    /// Inserts a ledger row recorded at `recordedAt`.
    func insertDelivery(eventID: String, topic: String, recordedAt: Date) async throws {
        try await query(
            """
            INSERT INTO push.deliveries (event_id, token, topic, user_id, result, recorded_at)
            VALUES (\(eventID), 'aa', \(topic), 'u-1', '{}', \(recordedAt))
            """,
            logger: sqlLogger
        )
    }
}
