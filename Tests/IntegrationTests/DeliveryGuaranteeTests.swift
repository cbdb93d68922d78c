import KafkaMessages
import Foundation
import HeraldService
import KafkaTransport
import MockAPNS
import PostgresNIO
import Testing

/// The idempotency ledger on real parts: reading every event again must push nothing twice and
/// republish exactly the recorded results, 410 events included.
@Suite(.timeLimit(.minutes(5)))
struct DeliveryGuaranteeTests {
    @Test func readingEverythingAgainPushesNothingTwiceAndRepublishesIdenticalResults() async throws {
        let gone = TestDevice(user: "u-2", token: TestDevice.randomToken(), environment: "production")
        let testbed = try HeraldTestbed(unregisteredTokens: [gone.token: 1_900_000_000_000])
        let topics = testbed.topics
        try await testbed.withMocks {
            let users = ["u-1", "u-2"]
            let devices = TestDevice.twoPerUser(users) + [gone]
            try await testbed.register(devices)
            let eventCount = 20

            // Only the first event can reach the gone device: its 410 unregisters the token, so the
            // first event is published alone and the others once its results are out.
            let expectedOutcomes = eventCount * (devices.count - 1) + 1
            let eventID = { (index: Int) in "\(testbed.bundleID)-event-\(index)" }

            // First pass, then a second Herald in a new consumer group that reads everything again.
            let reader = try TopicReader(topics: [topics.results, topics.unregistered])
            var records: [KafkaMessage] = []
            for pass in 1...2 {
                let configuration = try await testbed.heraldConfiguration(group: "herald-pass\(pass)-\(UUID().uuidString)")
                let herald = try HeraldApplication.makeServiceGroup(configuration: configuration, logger: testbed.logger)
                records += try await withRunningServices(herald) {
                    var read: [KafkaMessage] = []
                    if pass == 1 {
                        try await testbed.waitForActiveTokens(users: users, count: devices.count)
                        try await testbed.publishEvent(id: eventID(0), users: users)
                        read += try await reader.read(timeout: .seconds(60)) { first in
                            first.filter { $0.topic == topics.results }.count >= devices.count
                        }
                        for index in 1..<eventCount {
                            try await testbed.publishEvent(id: eventID(index), users: users)
                        }
                    }
                    let before = records + read
                    return try await read
                        + reader.read(timeout: .seconds(120)) { more in
                            (before + more).filter { $0.topic == topics.results }.count >= pass * expectedOutcomes
                        }
                }
            }
            // Anything published late (a duplicate) would show up here.
            records += try await reader.read(timeout: .seconds(2)) { _ in false }

            // One push per (event, device) that was still registered; the gone device got one 410.
            for device in devices where device.token != gone.token {
                #expect(testbed.pushCounts(device).right == eventCount)
            }
            #expect(testbed.production.repeatedAPNSIDCount == 0 && testbed.sandbox.repeatedAPNSIDCount == 0)

            // Every (event, device) has exactly one distinct outcome, published once per pass.
            let results = records.filter { $0.topic == topics.results }.compactMap(ResultRecord.init)
            let byKey = Dictionary(grouping: results, by: \.key)
            #expect(byKey.count == expectedOutcomes)
            #expect(byKey.values.allSatisfy { $0.count == 2 && Set($0.map(\.value)).count == 1 })
            let goneOutcomes = results.filter { $0.token == gone.token }
            #expect(goneOutcomes.count == 2 && goneOutcomes.allSatisfy { $0.status == "unregistered" })
            // The token was unregistered by the first 410 it met; its event is republished with it.
            let unregistered = records.filter { $0.topic == topics.unregistered }
            #expect(unregistered.count == 2 && Set(unregistered.map(\.value)).count == 1)
        }
    }

    /// An upgrade from the unpartitioned ledger keeps its idempotency: outcomes recorded in
    /// `push.deliveries` by the previous version are republished byte for byte by `herald run`,
    /// and nothing is pushed again.
    @Test func outcomesRecordedByThePreviousLedgerAreRepublishedNotPushedAgain() async throws {
        let testbed = try HeraldTestbed()
        let topics = testbed.topics
        try await testbed.withMocks {
            let devices = TestDevice.twoPerUser(["u-1"])
            let eventID = "\(testbed.bundleID)-before-upgrade"
            let results = devices.map { #"{"event_id":"\#(eventID)","token":"\#($0.token)","status":"unregistered","by":"v4"}"# }
            let unregistered = #"{"token":"\#(devices[0].token)","event_id":"\#(eventID)"}"#
            // The table as migration 2 made it, with the rows the previous version wrote, before
            // Herald starts (as at an upgrade); in one transaction, so no housekeeping pass of
            // another test's Herald sees it empty and drops it in between. Migrated first, so the
            // schema exists when this test is the database's first.
            try await RegistryDatabase.withStore(migrate: true) { _, database in
                try await database.withTransaction(logger: database.sqlLogger) { connection in
                    try await connection.query(
                        """
                        CREATE TABLE IF NOT EXISTS push.deliveries (
                            event_id text NOT NULL, token text NOT NULL, topic text NOT NULL, user_id text NOT NULL,
                            result text NOT NULL, unregistered_event text NULL,
                            recorded_at timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (event_id, token))
                        """,
                        logger: database.sqlLogger
                    )
                    for (index, device) in devices.enumerated() {
                        try await connection.query(
                            """
                            INSERT INTO push.deliveries (event_id, token, topic, user_id, result, unregistered_event)
                            VALUES (\(eventID), \(device.token), \(testbed.bundleID), 'u-1', \(results[index]), \(index == 0 ? unregistered : nil))
                            """,
                            logger: database.sqlLogger
                        )
                    }
                }
            }
            let reader = try TopicReader(topics: [topics.results, topics.unregistered])
            let configuration = try await testbed.heraldConfiguration(group: "herald-upgrade-\(UUID().uuidString)")
            let records = try await withRunningServices(try HeraldApplication.makeServiceGroup(configuration: configuration, logger: testbed.logger)) {
                try await testbed.register(devices)
                try await testbed.waitForActiveTokens(users: ["u-1"], count: devices.count)
                try await testbed.publishEvent(id: eventID, users: ["u-1"])
                return try await reader.read(timeout: .seconds(60)) { $0.count >= 3 }
            }
            #expect(Set(records.filter { $0.topic == topics.results }.map(\.value)) == Set(results.map { Array($0.utf8) }))
            #expect(records.filter { $0.topic == topics.unregistered }.map(\.value) == [Array(unregistered.utf8)])
            #expect(devices.allSatisfy { testbed.pushCounts($0).right == 0 }, "recorded before the upgrade: not pushed again")
        }
    }
}
