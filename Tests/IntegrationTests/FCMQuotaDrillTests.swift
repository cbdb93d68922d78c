import APNSCore
import Foundation
import PushCore
import PushPipeline
import PushStores
import KafkaMessages
import MockFCM
import Testing

/// A quota drill against the real `herald`: the mock FCM answers every send to the project
/// 429 QUOTA_EXCEEDED (a QuotaFailure naming the project's quota, Retry-After the seconds left)
/// for 30 s while events reach ten users, each with an iPhone and an Android phone.
@Suite(.timeLimit(.minutes(5)))
struct FCMQuotaDrillTests {
    @Test func aSpentProjectQuotaPausesTheProjectsSendsAndNothingElse() async throws {
        let testbed = try HeraldTestbed()
        let users = (0..<10).map { "quota-\($0)-\(UUID().uuidString.prefix(6))" }
        let iPhones = users.map { TestDevice(user: $0, token: TestDevice.randomToken(), environment: "production") }
        let pixels = users.map { AndroidDeliveryIntegrationTests.pixel($0) }
        try await testbed.withMocks {
            let environment = try await testbed.heraldEnvironment(group: "herald-\(UUID().uuidString)")
            let herald = try await testbed.startHerald(environment)
            try await testbed.register(iPhones)
            for (user, pixel) in zip(users, pixels) { try await testbed.registerAndroid(user: user, token: pixel, at: "2026-11-28T10:00:00Z") }
            try await testbed.waitForActiveDevices(users: users, count: 20)
            let exhaustedAt = WallClock.millisecondsSince1970()
            testbed.fcm.exhaustQuota(ofProject: testbed.fcmProjectID, for: .seconds(30))
            let reader = try TopicReader(topics: [testbed.topics.results])

            // The first wave meets the spent quota; the second comes after FCM said so.
            var records: [KafkaMessage] = []
            for index in 0..<5 { try await testbed.publishMixedEvent(id: "quota-\(index)", users: [users[index]]) }
            records += try await reader.read(timeout: .seconds(30)) { records.count + $0.count >= 5 }
            // Sent at most once while the quota is spent: a first attempt after FCM's answer pauses
            // unsent (under load the wave may reach Herald in more than one poll).
            try await Self.eventually {
                pixels.prefix(5).allSatisfy { testbed.fcm.requestCount(token: $0) <= 1 }
                    && pixels.prefix(5).contains { testbed.fcm.requestCount(token: $0) == 1 }
            }
            for index in 5..<10 { try await testbed.publishMixedEvent(id: "quota-\(index)", users: [users[index]]) }
            records += try await reader.read(timeout: .seconds(30)) { records.count + $0.count >= 10 }
            // The iPhones' sends went on: all ten delivered while the Android ones wait.
            #expect(Set(records.compactMap { $0.json?["token"] as? String }) == Set(iPhones.map(\.token)), "only iPhones so far")
            #expect(pixels.suffix(5).allSatisfy { testbed.fcm.requestCount(token: $0) == 0 }, "the second wave's first attempts pause")

            records += try await reader.read(timeout: .seconds(150)) { records.count + $0.count >= 20 }
            let results = records.compactMap(\.json)
            #expect(results.count == 20, "one result per device")
            let android = results.filter { $0["platform"] as? String == "fcm" }
            #expect(android.count == 10 && android.allSatisfy { $0["status"] as? String == "delivered" }, "\(android)")
            #expect(pixels.allSatisfy { testbed.fcm.deliveredCount(token: $0) == 1 }, "each Android phone once")
            #expect(pixels.suffix(5).allSatisfy { testbed.fcm.requestCount(token: $0) == 1 }, "paused, never refused")
            let latencies = android.compactMap { $0["latency_ms"] as? Int }
            // Counted from when the quota was spent, not from when Herald read each event.
            let completed = android.compactMap { ($0["completed_at"] as? String).flatMap(RFC3339.parse)?.millisecondsSince1970 }
            #expect(
                completed.count == 10 && completed.allSatisfy { $0 >= exhaustedAt + 30_000 },
                "not before the quota's window: \(completed.map { $0 - exhaustedAt })")
            #expect((latencies.max() ?? 0) - (latencies.min() ?? 0) >= 10_000, "spread out, not in one instant: \(latencies.sorted())")

            herald.send(SIGTERM)
            #expect(try await herald.waitForExit(timeout: .seconds(30)) == 0)
        }
    }

    /// Waits up to 30 s for `condition` (10 s ran out twice while the other shard of the test
    /// command loaded both cores: a bound on waiting, not a timing the test asserts).
    static func eventually(_ condition: () -> Bool) async throws {
        let deadline = ContinuousClock.now + .seconds(30)
        while !condition(), ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(100)) }
        #expect(condition())
    }
}
