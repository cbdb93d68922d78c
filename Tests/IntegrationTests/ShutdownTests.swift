import Foundation
import KafkaMessages
import MockAPNS
import Testing

/// SIGTERM as a rollout sends it, with a scraper's keep-alive connection open: Herald answers
/// 503 `shutting_down`, closes the idle connection, drains and exits 0 as soon as the drain is
/// done, long before HERALD_SHUTDOWN_GRACE_S, having published every result.
@Suite(.timeLimit(.minutes(5)))
struct ShutdownTests {
    @Test func sigtermWithAKeepAliveScraperDrainsAndExitsWithoutWaitingForIt() async throws {
        let users = (1...20).map { "u-\($0)" }
        let devices = TestDevice.twoPerUser(users)
        let testbed = try HeraldTestbed()
        try await testbed.withMocks {
            var (environment, httpPort) = try await testbed.heraldEnvironmentServingHTTP(group: "herald-\(UUID().uuidString)")
            // Long enough that waiting for the scraper would show: the test allows a quarter of it.
            environment["HERALD_SHUTDOWN_GRACE_S"] = "60"
            let herald = try await testbed.startHerald(environment)
            try await testbed.register(devices)
            try await testbed.waitForActiveTokens(users: users, count: devices.count)
            let ready = try await ReadinessTests.waitForReadiness(port: httpPort) { status, _ in status == 200 }
            #expect(ready.status == 200, "\(ready.body)")

            let scraper = try #require(KeepAliveHTTPConnection(port: httpPort))
            let first = try #require(scraper.get("/metrics"))
            #expect(first.status == 200)
            #expect(first.headers["connection"] == nil, "kept alive while Herald runs")
            // A load balancer's probe keeps its connection too: every endpoint, an unknown path
            // and a second scrape answered in turn on one connection, each framed by its length.
            let probe = try #require(KeepAliveHTTPConnection(port: httpPort))
            let answers = ["/health/ready", "/health/live", "/metrics", "/nothing-here", "/metrics", "/health/ready"].map { probe.get($0) }
            #expect(answers.map { $0?.status } == [200, 200, 200, 404, 200, 200])
            #expect(answers.map { $0?.body.hasPrefix("ready") } == [true, false, false, false, false, true])
            #expect(answers[1]?.body == "live\n" && answers[3]?.body == "not found\n")
            #expect([answers[2], answers[4]].allSatisfy { $0?.body.contains("# TYPE herald_results_total counter") == true })
            #expect(answers.allSatisfy { $0?.headers["connection"] == nil }, "none closes the connection while Herald runs")

            for (index, user) in users.enumerated() {
                try await testbed.publishEvent(id: "e-\(index)", users: [user])
            }
            let reader = try TopicReader(topics: [testbed.topics.results])
            let before = try await reader.read(timeout: .seconds(120)) { !$0.isEmpty }

            let stopping = ContinuousClock.now
            herald.send(SIGTERM)
            #expect(scraper.isClosedByServer(within: .seconds(10)), "the idle keep-alive connection is closed when the drain begins")
            let status = try await herald.waitForExit(timeout: .seconds(15))
            #expect(status == 0, "exited within 15 s of SIGTERM (grace 60 s): \(String(describing: status))")
            print("herald exited \(ContinuousClock.now - stopping) after SIGTERM with a keep-alive scraper connected")

            // Nothing lost and nothing pushed twice: the next instance finishes what was not
            // consumed yet, and every device got exactly one push.
            let again = try await testbed.startHerald(environment)
            func keys(_ records: [KafkaMessage]) -> Set<String> { Set((before + records).compactMap(ResultRecord.init).map(\.key)) }
            let after = try await reader.read(timeout: .seconds(120)) { keys($0).count >= devices.count }
            #expect(keys(after).count == devices.count)
            for device in devices {
                let mock = device.environment == "production" ? testbed.production : testbed.sandbox
                #expect(mock.pushCount(token: device.token) == 1, "\(device.environment) device of \(device.user)")
            }
            // Its signal handlers are installed once it serves HTTP (a SIGTERM before that kills it).
            let live = try await ReadinessTests.waitForReadiness(port: httpPort) { status, _ in status != nil }
            #expect(live.status != nil)
            again.send(SIGTERM)
            #expect(try await again.waitForExit(timeout: .seconds(15)) == 0)
        }
    }
}
