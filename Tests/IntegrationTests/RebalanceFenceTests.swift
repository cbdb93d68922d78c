import Foundation
import MockAPNS
import Testing

/// A rebalance while APNs is slow and refusing: the first instance cannot finish its messages
/// within the revocation drain, so the partitions a second instance takes over are revoked with
/// sends still retrying. Those sends must start no further attempt, or both instances push the
/// same notification once APNs recovers.
@Suite(.timeLimit(.minutes(4)))
struct RebalanceFenceTests {
    @Test func sendsOfRevokedPartitionsStopSoOnlyTheNewOwnerPushes() async throws {
        let users = (1...16).map { "fence-\($0)" }
        let devices = users.map { TestDevice(user: $0, token: TestDevice.randomToken(), environment: "production") }
        let warmUp = TestDevice(user: "fence-warm-up", token: TestDevice.randomToken(), environment: "production")
        let testbed = try HeraldTestbed(partitions: 4)
        try await testbed.withMocks {
            var environment = try await testbed.heraldEnvironment(group: "herald-\(UUID().uuidString)")
            environment["HERALD_RETRY_MAX_ATTEMPTS"] = "1000"
            func startInstance() async throws -> (herald: HeraldProcess, port: Int) {
                var instanceEnvironment = environment
                let port = try freePort()
                instanceEnvironment["HERALD_HTTP_PORT"] = String(port)
                return (try await testbed.startHerald(instanceEnvironment), port)
            }
            let first = try await startInstance()
            try await testbed.register(devices + [warmUp])
            try await testbed.waitForActiveTokens(users: users + [warmUp.user], count: devices.count + 1)
            // One push succeeds first: until then APNs (and the mock) allow one stream per connection.
            try await testbed.publishEvent(id: "fence-warm-up", users: [warmUp.user])
            try await waitUntil("the warm-up push arrived", timeout: .seconds(60)) {
                testbed.production.pushCount(token: warmUp.token) == 1
            }
            // Every attempt from now on waits 3 s for a 429: the messages stay unfinished.
            testbed.production.setFaults(MockAPNSFaults(tooManyRequestsFraction: 1, latency: .init(fixed: .seconds(3)), seed: 7))
            for (index, user) in users.enumerated() {
                try await testbed.publishEvent(id: "fence-\(index)", users: [user])
            }
            try await waitUntil("the first instance tried every device", timeout: .seconds(60)) {
                testbed.production.statusCounts()[429, default: 0] >= devices.count
            }

            // The second instance joins: the first drains for 15 s, cannot finish, and revokes.
            let second = try await startInstance()
            try await waitUntil("the second instance owns partitions", timeout: .seconds(90)) {
                Self.metric("herald_assigned_partitions", ["lane": "urgent"], port: second.port) ?? 0 > 0
            }
            // Attempts the first instance had in flight at the revocation end (3 s) before APNs
            // recovers; from then on only attempts started after the revocation could succeed.
            try await Task.sleep(for: .seconds(5))
            testbed.production.setFaults(.none)

            try await waitUntil("every device got its push", timeout: .seconds(90)) {
                devices.allSatisfy { testbed.production.pushCount(token: $0.token) >= 1 }
            }
            // Room for retries of the first instance, had they not been fenced (backoff under 2 s).
            try await Task.sleep(for: .seconds(5))
            let pushedTwice = devices.count { testbed.production.pushCount(token: $0.token) > 1 }
            #expect(pushedTwice == 0, "\(pushedTwice) of \(devices.count) devices pushed twice")
            let fenced = Self.metric("herald_sends_fenced_total", port: first.port) ?? 0
            #expect(fenced > 0, "the first instance fenced the sends of its revoked partitions")
        }
    }

    /// A sample of Herald's `/metrics` with exactly `labels`, or nil when it cannot be read.
    private static func metric(_ name: String, _ labels: [String: String] = [:], port: Int) -> Double? {
        guard let body = httpGet(port: port, path: "/metrics")?.body else { return nil }
        return (try? PrometheusText(body))?.value(name, labels)
    }
}

/// Polls `condition` every 200 ms until it holds; throws when `timeout` passes first.
func waitUntil(_ what: String, timeout: Duration, _ condition: () -> Bool) async throws {
    let clock = ContinuousClock()
    let deadline = clock.now + timeout
    while !condition() {
        guard clock.now < deadline else { throw TestFailure("timed out waiting until \(what)") }
        try await Task.sleep(for: .milliseconds(200))
    }
}
