import APNSCore
import Foundation
import KafkaMessages
import KafkaTransport
import MockAPNS
import MockFCM
import Testing

/// The crash and graceful-stop guarantees for both platforms at once: a campaign to users with an
/// iPhone and an Android device each, the real `herald` stopped mid-run (SIGTERM, then a
/// restart) or killed (SIGKILL, then a restart). Every (event, device) gets its result on both
/// platforms; a graceful stop pushes nothing twice anywhere; a crash repeats at most the sends in
/// flight (HERALD_MAX_CONCURRENT_SENDS), on either platform.
@Suite(.timeLimit(.minutes(8)))
struct MixedCampaignChaosTests {
    static let permits = 100

    /// Runs `events` events to `users`' devices on both platforms, calling `disrupt` with the
    /// pushes accepted so far (both mocks) on each poll; returns the results and the pushes per device.
    static func run(
        users: Int,
        events: Int,
        disrupt: (_ pushes: Int, _ expected: Int, _ herald: inout HeraldProcess) async throws -> Void
    ) async throws -> (results: [ResultRecord], apple: [Int], android: [Int], expected: Int) {
        let testbed = try HeraldTestbed(partitions: 4)
        return try await testbed.withMocks {
            let names = (0..<users).map { "mixed-\($0)" }
            let iPhones = names.map { TestDevice(user: $0, token: TestDevice.randomToken(), environment: "production") }
            let pixels = names.map { "\($0):APA91b_" + UUID().uuidString }
            var environment = try await testbed.heraldEnvironment(group: "herald-\(UUID().uuidString)")
            environment["HERALD_MAX_CONCURRENT_SENDS"] = String(permits)
            _ = try await testbed.heraldConfiguration(group: "migrate-only")
            let logPath = testbed.directory.appendingPathComponent("herald.log").path
            var herald = try HeraldProcess(environment: environment, logPath: logPath)
            try await testbed.register(iPhones)
            for (user, pixel) in zip(names, pixels) { try await testbed.registerAndroid(user: user, token: pixel, at: "2026-11-21T10:00:00Z") }
            try await testbed.waitForActiveDevices(users: names, count: 2 * users)
            for index in 0..<events { try await testbed.publishMixedEvent(id: "mixed-\(index)", users: names) }
            let expected = events * 2 * users
            let reader = try TopicReader(topics: [testbed.topics.results])
            var results: [ResultRecord] = []
            var keys = Set<String>()
            let clock = ContinuousClock()
            let deadline = clock.now + .seconds(300)
            while keys.count < expected, clock.now < deadline {
                let batch = try await reader.consumer.poll(maxMessages: 5000, timeout: .milliseconds(200)).compactMap(ResultRecord.init)
                results += batch
                keys.formUnion(batch.map(\.key))
                try await disrupt(testbed.production.totalAcceptedPushes + testbed.fcm.totalDelivered, expected, &herald)
            }
            results += try await reader.read(timeout: .seconds(2)) { _ in false }.compactMap(ResultRecord.init)
            herald.send(SIGTERM)
            _ = try await herald.waitForExit(timeout: .seconds(30))
            #expect(testbed.production.repeatedAPNSIDCount == iPhones.map { max(0, testbed.production.pushCount(token: $0.token) - events) }.reduce(0, +))
            return (
                results, iPhones.map { testbed.production.pushCount(token: $0.token) }, pixels.map { testbed.fcm.deliveredCount(token: $0) }, expected
            )
        }
    }

    /// Every (event, device) has one outcome (identical copies allowed), delivered.
    static func expectEveryResult(_ results: [ResultRecord], expected: Int) {
        let byKey = Dictionary(grouping: results, by: \.key)
        #expect(byKey.count == expected, "every (event, device) on both platforms has an outcome")
        #expect(byKey.values.allSatisfy { Set($0.map(\.value)).count == 1 }, "repeats only as identical copies")
        #expect(results.allSatisfy { $0.status == "delivered" }, "\(Dictionary(grouping: results, by: \.status).mapValues(\.count))")
    }

    @Test func aGracefulStopMidCampaignPushesNothingTwiceOnEitherPlatform() async throws {
        let events = 150
        var stopped = false
        let run = try await Self.run(users: 20, events: events) { pushes, expected, herald in
            guard !stopped, pushes >= expected / 3 else { return }
            stopped = true
            #expect(pushes < expected, "SIGTERM while pushes were still going on")
            herald.send(SIGTERM)
            #expect(try await herald.waitForExit(timeout: .seconds(30)) == 0)
            herald = try HeraldProcess(environment: herald.environment, logPath: herald.logPath)
        }
        #expect(stopped)
        Self.expectEveryResult(run.results, expected: run.expected)
        #expect(run.apple.allSatisfy { $0 == events }, "every iPhone got every event once")
        #expect(run.android.allSatisfy { $0 == events }, "every Android device got every event once")
    }

    @Test func aCrashMidCampaignLosesNothingAndRepeatsAtMostTheSendsInFlight() async throws {
        let events = 150
        var killed = false
        let run = try await Self.run(users: 20, events: events) { pushes, expected, herald in
            guard !killed, pushes >= expected / 3 else { return }
            killed = true
            herald.send(SIGKILL)
            _ = try await herald.waitForExit(timeout: .seconds(30))
            herald = try HeraldProcess(environment: herald.environment, logPath: herald.logPath)
        }
        #expect(killed)
        Self.expectEveryResult(run.results, expected: run.expected)
        #expect(run.apple.allSatisfy { $0 >= events } && run.android.allSatisfy { $0 >= events }, "nothing lost")
        let repeated = (run.apple + run.android).map { $0 - events }.reduce(0, +)
        print("mixed crash: \(repeated) second pushes over both platforms (bound \(Self.permits))")
        #expect(repeated <= Self.permits, "repeats bounded by the send permits")
    }
}
