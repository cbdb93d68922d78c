import APNSCore
import PushCore
import Foundation
import KafkaMessages
import MockAPNS
import MockFCM
import Synchronization
import Testing

/// A rollout during a paced campaign, as an operator runs one: one instance reads both lanes
/// while a campaign is paced by HERALD_BULK_MAX_RATE and an urgent alert is published every
/// 200 ms; a second instance starts, then the first gets SIGTERM. Every notification is delivered
/// exactly once, the first instance exits 0, and the urgent alerts are not held behind the
/// campaign's drain: the bulk lane is a group of its own, and its sends that have not started are
/// given up at once on revocation.
@Suite(.timeLimit(.minutes(6)))
struct CampaignRolloutTests {
    /// The broker's own delay before a join completes: Tansu waits half of session.timeout.ms
    /// (TestEnvironment.kafkaProperties) for the first join of a group generation.
    static let joinDelay: Int64 = 1_500

    enum Variant: CaseIterable, Sendable {
        case apnsOnly
        /// Every other campaign user and alert user has an Android phone (through the mock FCM)
        /// instead of an iPhone, and every event carries both platforms' parts.
        case halfOnAndroid
        /// APNs answers 429 to a fifth of the requests all along, so the SIGTERM lands while
        /// sends sleep in their backoff.
        case during429s
    }

    @Test(arguments: Variant.allCases)
    func aRolloutDuringAPacedCampaignDeliversEverythingOnceAndHoldsNoUrgentAlert(variant: Variant) async throws {
        let campaign = 6_000
        let rate = 300
        let halfOnAndroid = variant == .halfOnAndroid
        let faults = variant == .during429s ? MockAPNSFaults(tooManyRequestsFraction: 0.2, seed: 48) : .none
        let testbed = try HeraldTestbed(partitions: 6, bulkLane: true, faults: faults)
        let campaignUsers = (0..<campaign).map { "campaign-\($0)" }
        let urgentUsers = (0..<120).map { "alert-\($0)" }
        let users = campaignUsers + urgentUsers
        let androidUsers = halfOnAndroid ? users.enumerated().filter { $0.offset % 2 == 1 }.map(\.element) : []
        let androidTokens = androidUsers.map { AndroidDeliveryIntegrationTests.pixel($0) }
        try await testbed.insertDevices(users: users.filter { !Set(androidUsers).contains($0) })
        try await testbed.insertAndroidDevices(users: androidUsers, tokens: androidTokens)
        try await testbed.withMocks {
            var environment = try await testbed.heraldEnvironment(group: "herald-\(UUID().uuidString)")
            environment["HERALD_BULK_MAX_RATE"] = String(rate)
            environment["HERALD_SHUTDOWN_GRACE_S"] = "20"
            func startInstance() async throws -> HeraldProcess {
                var instanceEnvironment = environment
                let port = try freePort()
                instanceEnvironment["HERALD_HTTP_PORT"] = String(port)
                let herald = try await testbed.startHerald(instanceEnvironment)
                let ready = try await ReadinessTests.waitForReadiness(port: port, timeout: .seconds(90)) { status, _ in status == 200 }
                #expect(ready.status == 200, "\(ready.body)")
                return herald
            }
            let first = try await startInstance()
            try await testbed.publishEvents(
                topic: testbed.topics.bulkRequests,
                ids: campaignUsers.indices.map { "bulk-\($0)" },
                users: campaignUsers,
                priority: 5,
                fcmPackage: halfOnAndroid ? testbed.fcmPackage : nil
            )
            // An urgent alert every 200 ms throughout.
            let producedAt = ProducedAt()
            let alerts = Task {
                let clock = ContinuousClock()
                let start = clock.now
                for index in urgentUsers.indices {
                    try await clock.sleep(until: start + .milliseconds(200 * index))
                    producedAt.record("alert-\(index)")
                    try await testbed.publishEvents(
                        topic: testbed.topics.requests, ids: ["alert-\(index)"], users: [urgentUsers[index]], priority: 10,
                        fcmPackage: halfOnAndroid ? testbed.fcmPackage : nil)
                }
            }
            try await Task.sleep(for: .seconds(5))
            let secondJoined = WallClock.millisecondsSince1970()
            let second = try await startInstance()
            try await Task.sleep(for: .seconds(8))
            let sigterm = WallClock.millisecondsSince1970()
            first.send(SIGTERM)
            let firstExit = try await first.waitForExit(timeout: .seconds(30))
            #expect(firstExit == 0, "the first instance exits 0 within its grace")
            try await alerts.value

            let expected = campaign + urgentUsers.count
            let reader = try TopicReader(topics: [testbed.topics.results])
            let records = try await reader.read(timeout: .seconds(120)) { records in
                Set(records.compactMap(ResultRecord.init).map(\.key)).count >= expected
            }
            let results = records.compactMap { record in ResultRecord(record).map { ($0, record.timestampMilliseconds ?? 0) } }
            #expect(Set(results.map(\.0.key)).count == expected, "every notification has its result")
            #expect(results.allSatisfy { $0.0.status == "delivered" })
            #expect(testbed.production.totalAcceptedPushes == expected - androidUsers.count, "every iPhone notification pushed once")
            #expect(testbed.production.repeatedAPNSIDCount == 0, "none pushed twice")
            #expect(testbed.fcm.totalDelivered == androidUsers.count, "every Android notification pushed once")
            #expect(androidTokens.allSatisfy { testbed.fcm.deliveredCount(token: $0) == 1 }, "none pushed twice")

            // The urgent alerts around each rebalance: the second instance joining, the first leaving.
            var firstResult: [String: Int64] = [:]
            for (result, timestamp) in results where result.eventID.hasPrefix("alert-") {
                firstResult[result.eventID] = min(firstResult[result.eventID] ?? .max, timestamp)
            }
            let latencies = firstResult.compactMap { id, resultAt in producedAt.time(id).map { resultAt - $0 } }.sorted()
            let worstAroundJoin = producedAt.worst(firstResult, producedBetween: secondJoined - 1_000, and: secondJoined + 6_000)
            let worstAroundLeave = producedAt.worst(firstResult, producedBetween: sigterm - 1_000, and: sigterm + 6_000)
            print(
                "campaign rollout (\(variant)): \(campaign) paced at \(rate)/s, \(urgentUsers.count) alerts; produce -> result p50 \(latencies.isEmpty ? 0 : latencies[latencies.count / 2]) ms,",
                "max \(latencies.last ?? 0) ms; worst around the join \(worstAroundJoin) ms, around the SIGTERM \(worstAroundLeave) ms;",
                "first instance exit \(firstExit.map(String.init) ?? "none within 30 s")"
            )
            #expect(worstAroundJoin <= 3_000 + Self.joinDelay, "an urgent alert waited \(worstAroundJoin) ms as the second instance joined")
            #expect(worstAroundLeave <= 3_000 + Self.joinDelay, "an urgent alert waited \(worstAroundLeave) ms as the first instance left")

            second.send(SIGTERM)
            #expect(try await second.waitForExit(timeout: .seconds(30)) == 0)
        }
    }
}

extension ProducedAt {
    /// The longest produce -> result among the events produced between two instants (ms since 1970).
    func worst(_ firstResults: [String: Int64], producedBetween start: Int64, and end: Int64) -> Int64 {
        firstResults.compactMap { id, resultAt -> Int64? in
            guard let produced = time(id), produced >= start, produced <= end else { return nil }
            return resultAt - produced
        }.max() ?? 0
    }
}
