import APNSCore
import PushCore
import Foundation
import KafkaMessages
import MockAPNS
import Synchronization
import Testing

/// A rolling update as Kubernetes performs it, on real parts: three `herald run` instances in one
/// group over 12 partitions, a steady load, a scraper holding a keep-alive connection to each,
/// and each instance replaced in turn (SIGTERM, exit, a new one joins). Nothing is lost, nothing
/// is pushed twice, and every instance exits well within HERALD_SHUTDOWN_GRACE_S.
@Suite(.timeLimit(.minutes(8)))
struct RolloutDrillTests {
    @Test func aRollingRestartUnderSteadyLoadLosesNothingAndPushesNothingTwice() async throws {
        let users = (1...40).map { "u-\($0)" }
        let devices = TestDevice.twoPerUser(users)
        let testbed = try HeraldTestbed(partitions: 12)
        try await testbed.withMocks {
            var environment = try await testbed.heraldEnvironment(group: "herald-\(UUID().uuidString)")
            environment["HERALD_SHUTDOWN_GRACE_S"] = "60"
            var instances: [(herald: HeraldProcess, port: Int, scraper: KeepAliveHTTPConnection)] = []
            /// Starts an instance with a port of its own and waits until it is ready, scraped.
            func startInstance() async throws -> (herald: HeraldProcess, port: Int, scraper: KeepAliveHTTPConnection) {
                var instanceEnvironment = environment
                let port = try freePort()
                instanceEnvironment["HERALD_HTTP_PORT"] = String(port)
                let herald = try await testbed.startHerald(instanceEnvironment)
                let ready = try await ReadinessTests.waitForReadiness(port: port, timeout: .seconds(90)) { status, _ in status == 200 }
                #expect(ready.status == 200, "\(ready.body)")
                let scraper = try #require(KeepAliveHTTPConnection(port: port))
                #expect(scraper.get("/metrics")?.status == 200)
                return (herald, port, scraper)
            }
            for _ in 0..<3 { instances.append(try await startInstance()) }
            try await testbed.register(devices)
            try await testbed.waitForActiveTokens(users: users, count: devices.count)

            // A steady load: 25 events a second (50 notifications) for the whole rollout.
            let producedAt = ProduceTimes()
            let events = 600
            let load = Task {
                let clock = ContinuousClock()
                let start = clock.now
                for index in 0..<events {
                    try await clock.sleep(until: start + .milliseconds(40 * index))
                    producedAt.record(index)
                    try await testbed.publishEvent(id: "e-\(index)", users: [users[index % users.count]])
                }
            }
            try await Task.sleep(for: .seconds(3))
            var exitTimes: [Duration] = []
            for index in instances.indices {
                let stopping = ContinuousClock.now
                instances[index].herald.send(SIGTERM)
                let status = try await instances[index].herald.waitForExit(timeout: .seconds(30))
                #expect(status == 0, "instance \(index) exited within 30 s of SIGTERM (grace 60 s)")
                exitTimes.append(ContinuousClock.now - stopping)
                instances[index] = try await startInstance()
            }
            try await load.value

            // Every notification has its result; none was pushed twice.
            let reader = try TopicReader(topics: [testbed.topics.results])
            let records = try await reader.read(timeout: .seconds(120)) { records in
                Set(records.compactMap(ResultRecord.init).map(\.key)).count >= 2 * events
            }
            let results = records.compactMap { record in ResultRecord(record).map { ($0, record.timestampMilliseconds) } }
            #expect(Set(results.map(\.0.key)).count == 2 * events)
            #expect(results.allSatisfy { $0.0.status == "delivered" })
            #expect(testbed.production.repeatedAPNSIDCount == 0, "pushed twice")
            #expect(testbed.sandbox.repeatedAPNSIDCount == 0, "pushed twice")
            let accepted = testbed.production.totalAcceptedPushes + testbed.sandbox.totalAcceptedPushes
            #expect(accepted == 2 * events, "one push per (event, device)")

            // The results' latency during the rollout (first result per key), for BENCHMARKS.md.
            var firstResult: [String: Int64] = [:]
            for (result, timestamp) in results { if let timestamp, firstResult[result.key] == nil { firstResult[result.key] = timestamp } }
            let latencies = firstResult.compactMap { key, timestamp -> Int64? in
                guard let index = Int(key.prefix { $0 != "|" }.dropFirst(2)), let produced = producedAt.time(index) else { return nil }
                return timestamp - produced
            }.sorted()
            if !latencies.isEmpty {
                func at(_ fraction: Double) -> Int64 { latencies[min(latencies.count - 1, Int(Double(latencies.count) * fraction))] }
                let figures = "p50 \(at(0.5)) ms, p99 \(at(0.99)) ms, max \(latencies.last!) ms"
                print("rollout drill: \(latencies.count) results, produce -> result \(figures); exits after SIGTERM: \(exitTimes)")
            }
            for instance in instances {
                instance.herald.send(SIGTERM)
                #expect(try await instance.herald.waitForExit(timeout: .seconds(30)) == 0)
            }
        }
    }
}

/// When each event was produced (ms since 1970), written by the load task and read after it.
private final class ProduceTimes: Sendable {
    private let times = Mutex<[Int: Int64]>([:])
    func record(_ index: Int) { times.withLock { $0[index] = WallClock.millisecondsSince1970() } }
    func time(_ index: Int) -> Int64? { times.withLock { $0[index] } }
}
