import APNSCore
import PushCore
import Foundation
import KafkaMessages
import KafkaTransport
import MockAPNS
import PostgresNIO
import Synchronization
import Testing

/// The bulk lane against the real `herald`: a campaign on push.requests.bulk never holds back the
/// events on push.requests, HERALD_BULK_MAX_RATE paces a campaign evenly, and both lanes deliver
/// every notification exactly once.
@Suite(.timeLimit(.minutes(8)))
struct BulkLaneTests {
    @Test func urgentEventsOvertakeACampaignOf50000Notifications() async throws {
        let campaign = 50_000
        let testbed = try HeraldTestbed(bulkLane: true)
        let campaignUsers = (0..<campaign).map { "campaign-\($0)" }
        let urgentUsers = (0..<20).map { "urgent-\($0)" }
        try await testbed.insertDevices(users: campaignUsers + urgentUsers)
        try await testbed.withMocks {
            let environment = try await testbed.heraldEnvironmentServingHTTP(group: "herald-\(UUID().uuidString)")
            let herald = try await testbed.startHerald(environment.environment)
            _ = try await ReadinessTests.waitForReadiness(port: environment.httpPort, timeout: .seconds(90)) { status, _ in status == 200 }

            // Idle Herald: the same urgent events' latency for comparison.
            let producedAt = ProducedAt()
            try await testbed.publishUrgentEvents(ids: urgentUsers.indices.map { "idle-\($0)" }, users: urgentUsers, producedAt: producedAt)

            try await waitUntil("the idle events are pushed", timeout: .seconds(60)) {
                testbed.production.totalAcceptedPushes >= urgentUsers.count
            }

            // The campaign is published while Herald works on it; once a tenth of it is pushed the
            // urgent events follow, with the rest of the campaign still waiting on the bulk topic.
            let publishing = Task {
                try await testbed.publishEvents(
                    topic: testbed.topics.bulkRequests,
                    ids: campaignUsers.indices.map { "bulk-\($0)" },
                    users: campaignUsers,
                    priority: 5
                )
            }
            try await waitUntil("the campaign is under way", timeout: .seconds(120)) {
                testbed.production.totalAcceptedPushes >= urgentUsers.count + campaign / 10
            }
            try await testbed.publishUrgentEvents(ids: urgentUsers.indices.map { "urgent-\($0)" }, users: urgentUsers, producedAt: producedAt)
            try await publishing.value
            // Bad input on the bulk lane is dead-lettered as on push.requests, naming its topic.
            try await testbed.producer.send(
                KafkaOutgoingMessage(topic: testbed.topics.bulkRequests, key: Array("broken".utf8), value: Array("{this is not json".utf8))
            )

            let expected = campaign + 2 * urgentUsers.count
            let reader = try TopicReader(topics: [testbed.topics.results])
            let records = try await reader.read(timeout: .seconds(300)) { records in records.count >= expected }
            let results = records.compactMap { record in ResultRecord(record).map { ($0, record.timestampMilliseconds ?? 0) } }
            #expect(Set(results.map(\.0.key)).count == expected)
            #expect(results.allSatisfy { $0.0.status == "delivered" })
            #expect(testbed.production.totalAcceptedPushes == expected, "every notification pushed once")
            #expect(testbed.production.repeatedAPNSIDCount == 0)

            let campaignEnd = results.filter { $0.0.eventID.hasPrefix("bulk-") }.map(\.1).max() ?? 0
            let urgent = results.filter { $0.0.eventID.hasPrefix("urgent-") }
            #expect(urgent.count == urgentUsers.count)
            #expect(urgent.allSatisfy { $0.1 < campaignEnd }, "every urgent result came before the campaign's last")
            let idle = producedAt.latencies(results.filter { $0.0.eventID.hasPrefix("idle-") })
            let during = producedAt.latencies(urgent)
            let campaignStart = results.filter { $0.0.eventID.hasPrefix("bulk-") }.map(\.1).min() ?? 0
            print(
                "bulk lane: urgent produce -> result, idle p50 \(idle.p50) ms max \(idle.max) ms;",
                "during the campaign p50 \(during.p50) ms max \(during.max) ms;",
                "campaign \(campaign) notifications in \(campaignEnd - campaignStart) ms"
            )
            let deadLetters = try await TopicReader(topics: [testbed.topics.deadLetters]).read(timeout: .seconds(60)) { !$0.isEmpty }
            #expect(deadLetters.first?.header("herald-error") == "invalid_json")
            #expect(deadLetters.first?.header("herald-source-topic") == testbed.topics.bulkRequests)
            herald.send(SIGTERM)
            #expect(try await herald.waitForExit(timeout: .seconds(30)) == 0)
        }
    }

    @Test func theRateCapPacesACampaignEvenlyAndHoldsNoUrgentEvent() async throws {
        let cap = 200
        let campaign = 2_000
        let testbed = try HeraldTestbed(bulkLane: true)
        let campaignUsers = (0..<campaign).map { "paced-\($0)" }
        let urgentUsers = (0..<20).map { "urgent-\($0)" }
        try await testbed.insertDevices(users: campaignUsers + urgentUsers)
        try await testbed.withMocks {
            var environment = try await testbed.heraldEnvironmentServingHTTP(group: "herald-\(UUID().uuidString)")
            environment.environment["HERALD_BULK_MAX_RATE"] = String(cap)
            let herald = try await testbed.startHerald(environment.environment)
            _ = try await ReadinessTests.waitForReadiness(port: environment.httpPort, timeout: .seconds(90)) { status, _ in status == 200 }

            try await testbed.publishEvents(
                topic: testbed.topics.bulkRequests,
                ids: campaignUsers.indices.map { "bulk-\($0)" },
                users: campaignUsers,
                priority: 5
            )
            try await Task.sleep(for: .seconds(3))
            let producedAt = ProducedAt()
            try await testbed.publishUrgentEvents(ids: urgentUsers.indices.map { "urgent-\($0)" }, users: urgentUsers, producedAt: producedAt)

            let expected = campaign + urgentUsers.count
            let reader = try TopicReader(topics: [testbed.topics.results])
            let records = try await reader.read(timeout: .seconds(120)) { records in records.count >= expected }
            let results = records.compactMap { record in ResultRecord(record).map { ($0, record.timestampMilliseconds ?? 0) } }
            #expect(Set(results.map(\.0.key)).count == expected)
            #expect(testbed.production.totalAcceptedPushes == expected)

            let bulkTimes = results.filter { $0.0.eventID.hasPrefix("bulk-") }.map(\.1).sorted()
            let span = (bulkTimes.last ?? 0) - (bulkTimes.first ?? 0)
            #expect(span >= Int64(campaign * 1000 / cap) * 9 / 10, "2,000 at 200/s take about 10 s (took \(span) ms)")
            // No 2 s window well above the cap: at most 2 s x 200/s, plus a fifth for batching.
            var busiest = 0
            var windowStart = 0
            for (index, time) in bulkTimes.enumerated() {
                while time - bulkTimes[windowStart] >= 2000 { windowStart += 1 }
                busiest = max(busiest, index - windowStart + 1)
            }
            #expect(busiest <= 2 * cap * 6 / 5, "busiest 2 s window: \(busiest) results")
            let urgent = results.filter { $0.0.eventID.hasPrefix("urgent-") }
            #expect(urgent.allSatisfy { $0.1 < (bulkTimes.last ?? 0) }, "urgent events are not held to the cap")
            let during = producedAt.latencies(urgent)
            print("bulk lane at \(cap)/s: busiest 2 s window \(busiest), campaign span \(span) ms; urgent p50 \(during.p50) ms max \(during.max) ms")
            herald.send(SIGTERM)
            #expect(try await herald.waitForExit(timeout: .seconds(30)) == 0)
        }
    }
}

/// When each urgent event was produced (ms since 1970).
final class ProducedAt: Sendable {
    private let times = Mutex<[String: Int64]>([:])

    func record(_ id: String) { times.withLock { $0[id] = WallClock.millisecondsSince1970() } }

    /// When `id` was produced, if it was.
    func time(_ id: String) -> Int64? { times.withLock { $0[id] } }

    /// p50 and max of produce -> result over `results` (result, record timestamp).
    func latencies(_ results: [(ResultRecord, Int64)]) -> (p50: Int64, max: Int64) {
        let values = times.withLock { times in results.compactMap { result in times[result.0.eventID].map { result.1 - $0 } } }.sorted()
        guard !values.isEmpty else { return (0, 0) }
        return (values[values.count / 2], values[values.count - 1])
    }
}

extension HeraldTestbed {
    /// Registers one production device per user straight in PostgreSQL (as an app's bulk load
    /// would): a campaign's tens of thousands of users in seconds.
    func insertDevices(users: [String]) async throws {
        try await RegistryDatabase.withStore { _, client in
            for start in stride(from: 0, to: users.count, by: 10_000) {
                let batch = users[start..<min(start + 10_000, users.count)]
                try await client.insertRows(
                    batch.map { (topic: bundleID, token: TestDevice.randomToken(), user: $0, environment: "production", active: true) }
                )
            }
        }
    }

    /// Android devices of `users` (one each, `tokens` in order) written straight into the registry.
    func insertAndroidDevices(users: [String], tokens: [String]) async throws {
        guard !users.isEmpty else { return }
        _ = try await RegistryDatabase.withStore { _, client in
            try await client.query(
                """
                INSERT INTO push.device_tokens (topic, token, user_id, environment, platform, fcm_target, registered_at, updated_at)
                SELECT \(fcmPackage), r.token, r.user_id, 'production', 'fcm', 'token', now() - interval '2 hours', now()
                FROM unnest(\(tokens), \(users)) AS r(token, user_id)
                """,
                logger: client.sqlLogger
            )
        }
    }

    /// Publishes one event per (id, user) on `topic`, all at once, and waits for the broker's acks;
    /// with `fcmPackage`, each event also carries an `fcm` part for the users' Android devices.
    func publishEvents(topic: String, ids: [String], users: [String], priority: Int, fcmPackage: String? = nil) async throws {
        for start in stride(from: 0, to: ids.count, by: 5_000) {
            let messages = (start..<min(start + 5_000, ids.count)).map { index in
                KafkaOutgoingMessage(
                    topic: topic,
                    key: Array(ids[index].utf8),
                    value: Array(
                        """
                        {"id":"\(ids[index])","user_ids":["\(users[index])"],"topic":"\(bundleID)","priority":\(priority),
                         "payload":{"aps":{"alert":{"title":"Hello","body":"\(ids[index])"}}}\(fcmPackage.map { #","fcm":{"package":"\#($0)","message":{"notification":{"title":"Hello"}}}"# } ?? "")}
                        """.utf8
                    )
                )
            }
            let errors = await producer.send(messages).compactMap { $0 }
            if let error = errors.first { throw error }
        }
    }

    /// Publishes sign-in alerts (priority 10) on push.requests, 20 ms apart, recording when each went.
    func publishUrgentEvents(ids: [String], users: [String], producedAt: ProducedAt) async throws {
        for (id, user) in zip(ids, users) {
            producedAt.record(id)
            try await publishEvents(topic: topics.requests, ids: [id], users: [user], priority: 10)
            try await Task.sleep(for: .milliseconds(20))
        }
    }
}
