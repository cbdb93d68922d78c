import PostgresStores
import APNSCore
import PushStores
import Foundation
import HeraldService
import Logging
import PostgresNIO
import Testing

/// The registry on the real PostgreSQL (HERALD_POSTGRES_URL): the ordering rule, tombstones,
/// the 410 rule, lookups, rows written directly by app APIs, and migrations. Every test works on
/// its own bundle ID, so tests and other suites can share the database.
///
/// Serialized because the housekeeping tests (in an extension of this suite) delete by age
/// across the whole database. About 500 lines: one suite for the registry's rules, which share
/// their set-up and serialization.
@Suite(.serialized, .timeLimit(.minutes(5)))
struct TokenRegistryTests {
    let topic = "com.example.registry.\(UUID().uuidString.prefix(8).lowercased())"
    /// An hour ago with its milliseconds (…40.748 is as likely as …40.000): every comparison
    /// below is exact, so a timestamp that went through floating-point seconds shows.
    let base = Timestamp(millisecondsSince1970: Timestamp.now().millisecondsSince1970 - 3_600_000)

    func t(_ seconds: Int64) -> Timestamp { Timestamp(microsecondsSince1970: base.microsecondsSince1970 + seconds * 1_000_000) }

    func register(
        _ token: String,
        user: String = "u-1",
        environment: APNSEnvironment = .production,
        at time: Timestamp
    ) -> TokenRegistryUpdate {
        TokenRegistryUpdate(action: .register, userID: user, token: token, topic: topic, environment: environment, timestamp: time)
    }

    func unregister(_ token: String, at time: Timestamp) -> TokenRegistryUpdate {
        TokenRegistryUpdate(action: .unregister, userID: nil, token: token, topic: topic, environment: .production, timestamp: time)
    }

    /// Android devices beside Apple ones: one lookup returns both platforms (each under its own
    /// app: the bundle ID, the package), an FCM token is kept exactly as given, the ordering rule
    /// and the unregistered answer's rule hold for it, and a row an app API writes without a
    /// platform is an APNs device (migration 6's default).
    @Test func bothPlatformsInOneLookupWithTheSameRules() async throws {
        try await RegistryDatabase.withStore { store, database in
            let package = topic + ".android"
            let apple = TestDevice.randomToken()
            let android = "Fcm:APA91b_" + UUID().uuidString + "-MiXeD"
            #expect(try await store.apply(register(apple, at: t(1))))
            let fcm = TokenRegistryUpdate(
                action: .register, userID: "u-1", token: android, topic: package, environment: .production, timestamp: t(1),
                platform: .fcm, fcmTarget: .fid)
            #expect(try await store.apply(fcm))
            try await database.query(
                """
                INSERT INTO push.device_tokens (topic, token, user_id, environment, registered_at, updated_at)
                VALUES (\(topic), \(TestDevice.randomToken()), 'u-2', 'production', now(), now())
                """,
                logger: database.sqlLogger
            )
            let found = try await store.activeDevices(apnsTopic: topic, fcmPackage: package, userIDs: ["u-1", "u-2"])
            #expect(Set(found["u-1"]?.map(\.platform) ?? []) == [.apns, .fcm])
            let expected = DeviceToken(userID: "u-1", token: android, environment: .production, platform: .fcm, fcmTarget: .fid)
            #expect(found["u-1"]?.first { $0.platform == .fcm } == expected)
            #expect(found["u-2"]?.map(\.platform) == [.apns], "a row written without a platform is an APNs device")
            #expect(try await store.activeDevices(apnsTopic: nil, fcmPackage: topic, userIDs: ["u-1"]).isEmpty, "APNs rows are not FCM devices")
            // UNREGISTERED at t(5); a registration sent after it keeps the token, one sent before does not.
            #expect(try await store.markUnregistered(topic: package, token: android, at: t(5)))
            var late = fcm
            late.timestamp = t(4)
            #expect(try await !store.apply(late))
            late.timestamp = t(6)
            #expect(try await store.apply(late))
            #expect(try await store.activeDevices(apnsTopic: nil, fcmPackage: package, userIDs: ["u-1"])["u-1"]?.map(\.token) == [android])
        }
    }

    @Test func replayedAndOutOfOrderUpdatesChangeNothing() async throws {
        try await RegistryDatabase.withStore { store, database in
            let token = TestDevice.randomToken()
            #expect(try await store.apply(register(token, user: "u-1", at: t(10))))
            #expect(try await !store.apply(register(token, user: "u-1", at: t(10))), "a replay")
            #expect(try await !store.apply(register(token, user: "u-2", environment: .sandbox, at: t(5))), "an older registration")
            #expect(try await database.row(topic, token) == RegistryRow(user: "u-1", environment: "production", registeredAt: t(10)))

            #expect(try await store.apply(unregister(token, at: t(30))))
            #expect(try await !store.apply(unregister(token, at: t(30))), "a replay")
            #expect(try await !store.apply(unregister(token, at: t(20))), "an older unregistration")
            #expect(try await !store.apply(register(token, user: "u-3", at: t(25))), "a registration older than the unregistration")
            #expect(
                try await database.row(topic, token)
                    == RegistryRow(user: "u-1", environment: "production", registeredAt: t(10), unregisteredAt: t(30))
            )
            #expect(try await store.activeTokens(topic: topic, userIDs: ["u-1", "u-3"], environment: nil).isEmpty)

            #expect(try await store.apply(register(token, user: "u-4", environment: .sandbox, at: t(40))))
            #expect(try await database.row(topic, token) == RegistryRow(user: "u-4", environment: "sandbox", registeredAt: t(40)))
            let active = try await store.activeTokens(topic: topic, userIDs: ["u-1", "u-4"], environment: nil)
            #expect(active == ["u-4": [DeviceToken(userID: "u-4", token: token, environment: .sandbox)]])
        }
    }

    /// Every order of the same three updates ends in the same row.
    @Test func everyOrderOfTheSameUpdatesEndsTheSame() async throws {
        try await RegistryDatabase.withStore { store, database in
            let updates = { (token: String) in
                [
                    register(token, user: "u-1", at: t(10)),
                    unregister(token, at: t(20)),
                    register(token, user: "u-2", environment: .sandbox, at: t(30)),
                ]
            }
            let orders = [[0, 1, 2], [0, 2, 1], [1, 0, 2], [1, 2, 0], [2, 0, 1], [2, 1, 0]]
            for order in orders {
                let token = TestDevice.randomToken()
                for index in order + order {  // and every update replayed
                    try await store.apply(updates(token)[index])
                }
                #expect(
                    try await database.row(topic, token) == RegistryRow(user: "u-2", environment: "sandbox", registeredAt: t(30)),
                    "order \(order)"
                )
                #expect(try await database.tombstone(topic, token) == nil, "order \(order)")
            }
        }
    }

    @Test func unregisterBeforeItsRegistrationIsNotLost() async throws {
        try await RegistryDatabase.withStore { store, database in
            // The unregistration overtakes the older registration: the token must end unregistered.
            let overtaken = TestDevice.randomToken()
            #expect(try await !store.apply(unregister(overtaken, at: t(20))), "no row to mark yet")
            #expect(try await database.row(topic, overtaken) == nil)
            #expect(try await database.tombstone(topic, overtaken) == t(20))
            #expect(try await !store.apply(unregister(overtaken, at: t(15))), "an older unregistration")
            #expect(try await database.tombstone(topic, overtaken) == t(20))
            #expect(try await store.apply(register(overtaken, at: t(10))), "stored, unregistered")
            #expect(
                try await database.row(topic, overtaken)
                    == RegistryRow(user: "u-1", environment: "production", registeredAt: t(10), unregisteredAt: t(20))
            )
            #expect(try await database.tombstone(topic, overtaken) == nil, "folded into the row")
            #expect(try await store.activeTokens(topic: topic, userIDs: ["u-1"], environment: nil).isEmpty)
            #expect(try await !store.apply(unregister(overtaken, at: t(20))), "a replay")

            // A registration later than the early unregistration wins.
            let reregistered = TestDevice.randomToken()
            #expect(try await !store.apply(unregister(reregistered, at: t(20))))
            #expect(try await store.apply(register(reregistered, at: t(30))))
            #expect(try await database.row(topic, reregistered) == RegistryRow(user: "u-1", environment: "production", registeredAt: t(30)))
            #expect(try await database.tombstone(topic, reregistered) == nil)

            // Equal times: a registration applies only when strictly later.
            let tie = TestDevice.randomToken()
            #expect(try await !store.apply(unregister(tie, at: t(20))))
            #expect(try await store.apply(register(tie, at: t(20))))
            #expect(try await database.row(topic, tie)?.unregisteredAt == t(20))

            // A 410 for a token without a row leaves a tombstone as well, but marks nothing.
            let gone = TestDevice.randomToken()
            #expect(try await !store.markUnregistered(topic: topic, token: gone, at: t(20)))
            #expect(try await database.tombstone(topic, gone) == t(20))
            #expect(try await store.apply(register(gone, at: t(10))))
            #expect(try await database.row(topic, gone)?.unregisteredAt == t(20))
            let active = try await store.activeTokens(topic: topic, userIDs: ["u-1"], environment: nil)
            #expect(active == ["u-1": [DeviceToken(userID: "u-1", token: reregistered, environment: .production)]])
        }
    }

    /// Many concurrent writers of one token (Herald applies a poll batch's updates in parallel)
    /// end exactly where the same updates applied one by one end.
    @Test func concurrentUpdatesOfOneTokenEndAsIfAppliedInOrder() async throws {
        try await RegistryDatabase.withStore { store, database in
            for _ in 0..<20 {
                let token = TestDevice.randomToken()
                try await withThrowingDiscardingTaskGroup { group in
                    group.addTask { _ = try await store.apply(register(token, at: t(10))) }
                    group.addTask { _ = try await store.apply(unregister(token, at: t(20))) }
                    group.addTask { _ = try await store.markUnregistered(topic: topic, token: token, at: t(15)) }
                }
                #expect(
                    try await database.row(topic, token)
                        == RegistryRow(user: "u-1", environment: "production", registeredAt: t(10), unregisteredAt: t(20))
                )
                #expect(try await database.tombstone(topic, token) == nil)
            }
        }
    }

    @Test func theUnregisteredAnswerMarksOnlyTokensNotRegisteredAgainAfterItsTimestamp() async throws {
        try await RegistryDatabase.withStore { store, database in
            let apnsTimestamp = t(100)
            let registeredAgain = TestDevice.randomToken()
            let stale = TestDevice.randomToken()
            try await store.apply(register(registeredAgain, user: "u-1", at: t(101)))
            try await store.apply(register(stale, user: "u-2", at: t(99)))

            #expect(try await !store.markUnregistered(topic: topic, token: registeredAgain, at: apnsTimestamp))
            #expect(try await database.row(topic, registeredAgain)?.unregisteredAt == nil)
            #expect(try await store.markUnregistered(topic: topic, token: stale, at: apnsTimestamp))
            #expect(try await database.row(topic, stale)?.unregisteredAt == apnsTimestamp)
            #expect(try await !store.markUnregistered(topic: topic, token: stale, at: apnsTimestamp), "a replay")
            let active = try await store.activeTokens(topic: topic, userIDs: ["u-1", "u-2"], environment: nil)
            #expect(active.mapValues { $0.map(\.token) } == ["u-1": [registeredAgain]])
        }
    }

    /// The pipeline records outcomes in batches and marks through the ledger, in one transaction
    /// with the recorded outcomes: each caller gets the outcome that stands, and a push.unregistered
    /// event is kept only when its own mark changed the row.
    @Test func recordingABatchReturnsTheOutcomesThatStandAndKeepsUnregisteredEventsOnlyWhenTheyMarked() async throws {
        try await RegistryDatabase.withStore { store, database in
            let registeredAgain = TestDevice.randomToken()
            let stale = TestDevice.randomToken()
            let delivered = TestDevice.randomToken()
            let recordedBefore = TestDevice.randomToken()
            try await store.apply(register(registeredAgain, at: t(101)))
            try await store.apply(register(stale, at: t(99)))
            let event = "\(topic)-event"
            let otherEvent = "\(topic)-other-event"
            // A record of 2026-11-26, 11:00 UTC.
            let recordedAt: Int64 = 1_795_690_800_000
            func outcome(_ token: String, event: String = event, _ status: DeliveryStatus) -> RecordedDelivery {
                let gone = status == .unregistered
                return RecordedDelivery(
                    event: LedgerEvent(eventID: event, topic: topic, recordTimestampMilliseconds: recordedAt),
                    target: LedgerTarget(.apnsDevice, token),
                    userID: "u-1",
                    outcome: .send(
                        RecordedDelivery.SendOutcome(
                            status: status,
                            environment: .production,
                            apnsStatus: gone ? 410 : 200,
                            reason: gone ? "Unregistered" : nil,
                            attempts: 1,
                            latencyMilliseconds: 12,
                            completedAtMilliseconds: recordedAt + 12,
                            unregisteredAtMilliseconds: gone ? recordedAt - 1000 : nil
                        )
                    )
                )
            }
            let first = try await store.record([(outcome(recordedBefore, .delivered), nil)])
            #expect(first == [outcome(recordedBefore, .delivered)])

            let mark = { (token: String) in UnregisterMark(topic: topic, token: token, at: t(100)) }
            let batch: [(delivery: RecordedDelivery, mark: UnregisterMark?)] = [
                (outcome(delivered, .delivered), nil),
                (outcome(registeredAgain, .unregistered), mark(registeredAgain)),
                (outcome(stale, .unregistered), mark(stale)),
                (outcome(stale, event: otherEvent, .unregistered), mark(stale)),
                (outcome(recordedBefore, .failed), nil),
                (outcome(delivered, .rejected), nil),
            ]
            let standing = try await store.record(batch)
            #expect(standing.count == batch.count)
            #expect(standing[0] == outcome(delivered, .delivered))
            var notMarked = outcome(registeredAgain, .unregistered)
            notMarked.unregisteredAtMilliseconds = nil
            #expect(standing[1] == notMarked, "registered again after APNs' timestamp: no event")
            #expect(try await database.row(topic, registeredAgain)?.unregisteredAt == nil)
            // Two 410s of one token with the same timestamp: only the first applied marks.
            let staleOutcomes = [standing[2], standing[3]]
            #expect(staleOutcomes.filter { $0.unregisteredAtMilliseconds != nil }.count == 1)
            #expect(staleOutcomes.map(\.event.eventID) == [event, otherEvent])
            #expect(try await database.row(topic, stale)?.unregisteredAt == t(100))
            #expect(standing[4] == outcome(recordedBefore, .delivered), "recorded before: that outcome stands")
            #expect(standing[5] == standing[0], "the same (event, token) twice in one batch: one outcome stands")

            let recorded = try await store.recordedDeliveries(
                of: [event, otherEvent].map { LedgerEvent(eventID: $0, topic: topic, recordTimestampMilliseconds: recordedAt) })
            #expect(recorded.values.map(\.count).sorted() == [1, 4])
            for outcome in standing {
                #expect(recorded[outcome.event]?[outcome.target] == outcome)
            }
            #expect(try await store.record([]).isEmpty)
        }
    }

    @Test func environmentFilterReturnsOnlyThatEnvironmentsTokens() async throws {
        try await RegistryDatabase.withStore { store, _ in
            let phone = TestDevice.randomToken()
            let pad = TestDevice.randomToken()
            try await store.apply(register(phone, user: "u-1", environment: .production, at: t(1)))
            try await store.apply(register(pad, user: "u-1", environment: .sandbox, at: t(1)))
            let sandbox = try await store.activeTokens(topic: topic, userIDs: ["u-1"], environment: .sandbox)
            #expect(sandbox == ["u-1": [DeviceToken(userID: "u-1", token: pad, environment: .sandbox)]])
            let production = try await store.activeTokens(topic: topic, userIDs: ["u-1"], environment: .production)
            #expect(production == ["u-1": [DeviceToken(userID: "u-1", token: phone, environment: .production)]])
            let all = try await store.activeTokens(topic: topic, userIDs: ["u-1"], environment: nil)
            #expect(Set(all["u-1"] ?? []) == Set(sandbox["u-1"]! + production["u-1"]!))
        }
    }

    /// One query returns exactly the active tokens of a batch of users: not other apps' tokens,
    /// not unregistered ones, nothing for unknown users.
    @Test(arguments: [1_000, 10_000])
    func batchedLookupReturnsExactlyTheActiveTokens(userCount: Int) async throws {
        try await RegistryDatabase.withStore { store, database in
            let otherTopic = topic + ".other"
            var expected: [String: Set<DeviceToken>] = [:]
            var rows: [(topic: String, token: String, user: String, environment: String, active: Bool)] = []
            for index in 0..<userCount {
                let user = "user-\(index)"
                // 0, 1, 2 or 3 active devices, alternating environments.
                for device in 0..<(index % 4) {
                    let environment: APNSEnvironment = device % 2 == 0 ? .production : .sandbox
                    let token = TestDevice.randomToken()
                    rows.append((topic, token, user, environment.rawValue, true))
                    expected[user, default: []].insert(DeviceToken(userID: user, token: token, environment: environment))
                }
                if index % 5 == 0 { rows.append((topic, TestDevice.randomToken(), user, "production", false)) }
                if index % 7 == 0 { rows.append((otherTopic, TestDevice.randomToken(), user, "production", true)) }
            }
            try await database.insertRows(rows)
            // As autovacuum would after a bulk load: with stale statistics the planner may filter
            // the array row by row instead of probing the index with it.
            _ = try await database.query("ANALYZE push.device_tokens", logger: database.sqlLogger)
            let users = (0..<userCount).map { "user-\($0)" } + (0..<50).map { "unknown-\($0)" }

            let clock = ContinuousClock()
            let start = clock.now
            let tokens = try await store.activeTokens(topic: topic, userIDs: users, environment: nil)
            let elapsed = start.duration(to: clock.now)
            Logger(label: "test").info("batched lookup", metadata: ["users": "\(users.count)", "duration": "\(elapsed)"])

            let found: [String: Set<DeviceToken>] = tokens.mapValues { Set($0) }
            #expect(found == expected)
            let foundCount = tokens.values.reduce(0) { $0 + $1.count }
            let expectedCount = expected.values.reduce(0) { $0 + $1.count }
            #expect(foundCount == expectedCount, "no token twice")
        }
    }

    /// App APIs may write push.device_tokens themselves: the rule reads whatever row is there.
    @Test func rowsWrittenDirectlyWithSQLAreHonoured() async throws {
        try await RegistryDatabase.withStore { store, database in
            let active = TestDevice.randomToken()
            let unregistered = TestDevice.randomToken()
            try await database.insertRow(topic, active, user: "u-1", environment: "sandbox", registeredAt: t(50))
            try await database.insertRow(topic, unregistered, user: "u-1", registeredAt: t(50), unregisteredAt: t(60))

            let found = try await store.activeTokens(topic: topic, userIDs: ["u-1"], environment: nil)
            #expect(found == ["u-1": [DeviceToken(userID: "u-1", token: active, environment: .sandbox)]])

            #expect(try await !store.apply(register(active, user: "u-2", at: t(40))), "older than the row")
            #expect(try await !store.markUnregistered(topic: topic, token: active, at: t(45)), "a 410 before the registration")
            #expect(try await !store.apply(register(unregistered, user: "u-2", at: t(55))), "older than its unregistration")
            #expect(try await !store.apply(unregister(unregistered, at: t(58))))
            #expect(try await database.row(topic, active) == RegistryRow(user: "u-1", environment: "sandbox", registeredAt: t(50)))
            #expect(
                try await database.row(topic, unregistered)
                    == RegistryRow(user: "u-1", environment: "production", registeredAt: t(50), unregisteredAt: t(60))
            )

            #expect(try await store.markUnregistered(topic: topic, token: active, at: t(70)))
            #expect(try await store.apply(register(unregistered, user: "u-2", at: t(70))))
            let now = try await store.activeTokens(topic: topic, userIDs: ["u-1", "u-2"], environment: nil)
            #expect(now == ["u-2": [DeviceToken(userID: "u-2", token: unregistered, environment: .production)]])
        }
    }

    /// A tombstone written before an app API inserts the row itself is applied to that row by
    /// Herald's next write to the token.
    @Test func aTombstoneAppliesToARowAnAppAPIInsertedLater() async throws {
        try await RegistryDatabase.withStore { store, database in
            let token = TestDevice.randomToken()
            #expect(try await !store.apply(unregister(token, at: t(20))))
            try await database.insertRow(topic, token, user: "u-1", registeredAt: t(10))
            #expect(try await !store.apply(register(token, at: t(5))), "older than the row")
            #expect(
                try await database.row(topic, token)
                    == RegistryRow(user: "u-1", environment: "production", registeredAt: t(10), unregisteredAt: t(20))
            )
            #expect(try await database.tombstone(topic, token) == nil)
        }
    }

    @Test func migrationsRunTwiceAreANoOpAndRecordEveryVersion() async throws {
        try await RegistryDatabase.withScratchDatabase(migrate: false) { store, database in
            // Two instances starting together, then a third run: the advisory lock
            // serialises them and the later ones find nothing to do.
            try await withThrowingDiscardingTaskGroup { group in
                group.addTask { try await store.migrate() }
                group.addTask { try await store.migrate() }
            }
            let first = try await database.appliedMigrations()
            try await store.migrate()
            let second = try await database.appliedMigrations()
            #expect(first.map(\.version) == [1, 2, 3, 4, 5, 6, 7, 8])
            #expect(
                first.map(\.name) == [
                    "device tokens", "delivery ledger", "token tombstones", "device tokens by user first", "partitioned delivery ledger",
                    "android devices", "typed ledger targets", "web push subscriptions",
                ]
            )
            #expect(second == first, "a second run applies nothing: same versions, same applied_at")
            let tables = try await database.query(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = 'push' ORDER BY table_name",
                logger: database.sqlLogger
            ).collect().map { try $0.decode(String.self) }
            #expect(tables == ["deliveries", "delivery_ledger", "delivery_ledger_default", "device_tokens", "schema_migrations", "token_tombstones"])
            // The migrated schema works: the registry's statements run on it.
            #expect(try await store.apply(register(TestDevice.randomToken(), at: t(1))))
        }
    }
}

extension RegistryDatabase {
    /// Runs `body` with a registry on a database of its own, created for it and dropped after:
    /// for tests that change the whole schema (partitions), which the shared one must not see.
    static func withScratchDatabase<Result: Sendable>(
        migrate: Bool = true,
        _ body: (PostgresStore, PostgresClient) async throws -> Result
    ) async throws -> Result {
        let name = "herald_scratch_\(UUID().uuidString.prefix(8).lowercased())"
        // An identifier cannot be a bind parameter; `name` is generated above from [a-z0-9_].
        try await run("CREATE DATABASE \(name)")
        do {
            var url = try PostgresURL(TestEnvironment.postgresURL)
            url.database = name
            let result = try await withStore(url: url, migrate: migrate, body)
            try await run("DROP DATABASE IF EXISTS \(name) WITH (FORCE)")
            return result
        } catch {
            try? await run("DROP DATABASE IF EXISTS \(name) WITH (FORCE)")
            throw error
        }
    }

    private static func run(_ statement: String) async throws {
        try await withStore(migrate: false) { _, database in
            _ = try await database.query(PostgresQuery(unsafeSQL: statement), logger: database.sqlLogger)
        }
    }
}

/// A row of push.schema_migrations.
struct AppliedMigration: Equatable {
    var version: Int
    var name: String
    var appliedAt: Date
}

/// A registry row as the tests compare it.
struct RegistryRow: Equatable, CustomStringConvertible {
    var user: String
    var environment: String
    var registeredAt: Timestamp
    var unregisteredAt: Timestamp?

    var description: String {
        "\(user) \(environment) registered \(registeredAt) unregistered \(unregisteredAt.map { "\($0)" } ?? "-")"
    }
}

/// The test PostgreSQL through a client of its own, for the store and for direct SQL.
enum RegistryDatabase {
    /// Runs `body` with a registry on `url` (the test database by default), migrated unless told not to.
    static func withStore<Result: Sendable>(
        url: PostgresURL? = nil,
        migrate: Bool = true,
        _ body: (PostgresStore, PostgresClient) async throws -> Result
    ) async throws -> Result {
        let url = try url ?? PostgresURL(TestEnvironment.postgresURL)
        // The test server listens on loopback without TLS.
        let configuration = PostgresClient.Configuration(
            host: url.host,
            port: url.port,
            username: url.username,
            password: url.password,
            database: url.database,
            tls: .disable
        )
        let logger = Logger(label: "test.registry")
        let client = PostgresClient(configuration: configuration, backgroundLogger: logger)
        return try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { await client.run() }
            defer { group.cancelAll() }
            let store = PostgresStore(client: client, logger: logger)
            if migrate { try await store.migrate() }
            return try await body(store, client)
        }
    }
}

extension PostgresClient {
    var sqlLogger: Logger { Logger(label: "test.registry.sql") }

    func row(_ topic: String, _ token: String) async throws -> RegistryRow? {
        for try await (user, environment, registeredAt, unregisteredAt) in try await query(
            """
            SELECT user_id, environment, registered_at, unregistered_at FROM push.device_tokens
            WHERE topic = \(topic) AND token = \(token)
            """,
            logger: sqlLogger
        ).decode((String, String, Timestamp, Timestamp?).self) {
            return RegistryRow(user: user, environment: environment, registeredAt: registeredAt, unregisteredAt: unregisteredAt)
        }
        return nil
    }

    func tombstone(_ topic: String, _ token: String) async throws -> Timestamp? {
        for try await date in try await query(
            "SELECT unregistered_at FROM push.token_tombstones WHERE topic = \(topic) AND token = \(token)",
            logger: sqlLogger
        ).decode(Timestamp.self) {
            return date
        }
        return nil
    }

    /// Inserts a row as an app API would: its own `updated_at`, no Herald involved.
    func insertRow(
        _ topic: String,
        _ token: String,
        user: String,
        environment: String = "production",
        registeredAt: Timestamp,
        unregisteredAt: Timestamp? = nil
    ) async throws {
        try await query(
            """
            INSERT INTO push.device_tokens (topic, token, user_id, environment, registered_at, updated_at, unregistered_at)
            VALUES (\(topic), \(token), \(user), \(environment), \(registeredAt), 'epoch', \(unregisteredAt))
            """,
            logger: sqlLogger
        )
    }

    /// Inserts many rows in one statement (unregistered ones an hour ago).
    func insertRows(_ rows: [(topic: String, token: String, user: String, environment: String, active: Bool)]) async throws {
        try await query(
            """
            INSERT INTO push.device_tokens (topic, token, user_id, environment, registered_at, updated_at, unregistered_at)
            SELECT r.topic, r.token, r.user_id, r.environment, now() - interval '2 hours', now(),
                   CASE WHEN r.active THEN NULL ELSE now() - interval '1 hour' END
            FROM unnest(\(rows.map(\.topic)), \(rows.map(\.token)), \(rows.map(\.user)), \(rows.map(\.environment)),
                        \(rows.map(\.active))) AS r(topic, token, user_id, environment, active)
            """,
            logger: sqlLogger
        )
    }

    func appliedMigrations() async throws -> [AppliedMigration] {
        var applied: [AppliedMigration] = []
        for try await (version, name, appliedAt) in try await query(
            "SELECT version, name, applied_at FROM push.schema_migrations ORDER BY version",
            logger: sqlLogger
        ).decode((Int, String, Date).self) {
            applied.append(AppliedMigration(version: version, name: name, appliedAt: appliedAt))
        }
        return applied
    }
}
