import Foundation
import HeraldService
import MockAPNS
import ServiceLifecycle
import Testing

/// `/health/ready` of the running `herald`: each condition of readiness turns it off and on
/// (PostgreSQL's is in ``ChaosTests/postgresStoppedForTenSecondsLosesNothingAndReportsUnready()``).
@Suite(.timeLimit(.minutes(5)))
struct ReadinessTests {
    /// Polls `/health/ready` every 200 ms until `done(status, body)` holds or `timeout` passes;
    /// returns the last answer.
    static func waitForReadiness(
        port: Int,
        timeout: Duration = .seconds(60),
        until done: (Int?, String) -> Bool
    ) async throws -> (status: Int?, body: String) {
        let clock = ContinuousClock()
        let deadline = clock.now + timeout
        while true {
            let answer = httpGet(port: port, path: "/health/ready")
            if done(answer?.status, answer?.body ?? "") || clock.now >= deadline { return (answer?.status, answer?.body ?? "") }
            try await Task.sleep(for: .milliseconds(200))
        }
    }

    /// APNs readiness comes from Herald's own connections: probes and scrapes never connect to
    /// APNs (the mocks count every TCP connection); Herald is unready only while no connection
    /// to any APNs endpoint works and an attempt failed lately; one endpoint failing (the sandbox
    /// host here) leaves it ready while another works (finding 10 of issue 37).
    @Test func apnsReadinessComesFromHeraldsOwnConnectionsAndProbesNeverConnect() async throws {
        let phone = TestDevice(user: "u-1", token: TestDevice.randomToken(), environment: "production")
        let tablet = TestDevice(user: "u-2", token: TestDevice.randomToken(), environment: "sandbox")
        let testbed = try HeraldTestbed()
        try await testbed.withMocks {
            let productionPort = try freePort()
            let sandboxPort = try freePort()
            let httpPort = try freePort()
            var environment = try await testbed.heraldEnvironment(group: "herald-\(UUID().uuidString)")
            environment["HERALD_APNS_PRODUCTION_URL"] = "https://127.0.0.1:\(productionPort)"
            environment["HERALD_APNS_SANDBOX_URL"] = "https://127.0.0.1:\(sandboxPort)"
            environment["HERALD_HTTP_PORT"] = String(httpPort)
            environment["HERALD_RETRY_MAX_ATTEMPTS"] = "2"
            let herald = try await testbed.startHerald(environment)

            // Idle: ready, and twenty probes and scrapes open no APNs connection.
            let idle = try await Self.waitForReadiness(port: httpPort) { status, _ in status == 200 }
            #expect(idle.status == 200, "\(idle.body)")
            for _ in 0..<10 {
                #expect(httpGet(port: httpPort, path: "/health/ready")?.status == 200)
                #expect(httpGet(port: httpPort, path: "/metrics")?.status == 200)
            }
            #expect(testbed.production.acceptedConnectionCount == 0, "a probe or scrape connected to APNs")

            // No APNs endpoint can be reached: a push fails to connect and Herald is unready.
            try await testbed.register([phone, tablet])
            try await testbed.waitForActiveTokens(users: ["u-1", "u-2"], count: 2)
            try await testbed.publishEvent(id: "e-unreachable", users: ["u-1"])
            let down = try await Self.waitForReadiness(port: httpPort) { _, body in body == "not ready: apns_unreachable\n" }
            #expect(down.status == 503)
            #expect(down.body == "not ready: apns_unreachable\n")
            let connectionsBeforeProbes = testbed.production.acceptedConnectionCount
            for _ in 0..<10 { _ = httpGet(port: httpPort, path: "/metrics") }
            #expect(testbed.production.acceptedConnectionCount == connectionsBeforeProbes)

            let reader = try TopicReader(topics: [testbed.topics.results])
            let failed = try await reader.read(timeout: .seconds(90)) { records in records.contains { ResultRecord($0)?.eventID == "e-unreachable" } }
            #expect(failed.compactMap(ResultRecord.init).first { $0.eventID == "e-unreachable" }?.status == "failed")

            // The production endpoint comes up (a forwarder to the production mock starts on its
            // port); the next push connects and Herald is ready again.
            let forwarder = try LoopbackForwarder(from: productionPort, to: try await testbed.production.listeningPort(), directory: testbed.directory)
            defer { forwarder.stop() }
            try await testbed.publishEvent(id: "e-reachable", users: ["u-1"])
            let up = try await Self.waitForReadiness(port: httpPort) { status, _ in status == 200 }
            #expect(up.status == 200, "ready once a production connection opened: \(up.body)")

            // The sandbox endpoint still fails: its push is not delivered, yet Herald stays ready,
            // since its production connection works.
            try await testbed.publishEvent(id: "e-sandbox-down", users: ["u-2"])
            let records = try await reader.read(timeout: .seconds(90)) { records in
                Set(records.compactMap(ResultRecord.init).map(\.eventID)).isSuperset(of: ["e-reachable", "e-sandbox-down"])
            }
            let results = records.compactMap(ResultRecord.init)
            #expect(results.first { $0.eventID == "e-reachable" }?.status == "delivered")
            #expect(results.first { $0.eventID == "e-sandbox-down" }?.status == "failed")
            let afterSandboxFailure = httpGet(port: httpPort, path: "/health/ready")
            #expect(afterSandboxFailure?.status == 200, "one endpoint failing left Herald unready: \(afterSandboxFailure?.body ?? "")")
            #expect(testbed.production.pushCount(token: phone.token) == 1)

            herald.send(SIGTERM)
            #expect(try await herald.waitForExit(timeout: .seconds(30)) == 0)
        }
    }

    /// `sslmode=require` against a PostgreSQL that offers no TLS: Herald never falls back to
    /// plaintext; it stays unready, naming PostgreSQL.
    @Test func aRequiredTLSConnectionIsNeverMadeInPlaintext() async throws {
        let testbed = try HeraldTestbed()
        try await testbed.withMocks {
            var (environment, httpPort) = try await testbed.heraldEnvironmentServingHTTP(group: "herald-\(UUID().uuidString)")
            let plaintext = try #require(environment["HERALD_POSTGRES_URL"])
            _ = try await testbed.heraldConfiguration(group: "migrate-only")
            // The test PostgreSQL offers TLS (scripts/services.sh): a forwarder in front of it that
            // answers Herald's SSLRequest with "no TLS here".
            let port = try #require(URLComponents(string: plaintext)?.port)
            let forwardPort = try freePort()
            let forwarder = try LoopbackForwarder(from: forwardPort, to: port, directory: testbed.directory, refusingTLS: true)
            defer { forwarder.stop() }
            let forwarded = plaintext.replacingOccurrences(of: ":\(port)/", with: ":\(forwardPort)/")
            environment["HERALD_POSTGRES_URL"] = forwarded + (forwarded.contains("?") ? "&" : "?") + "sslmode=require"
            let herald = try HeraldProcess(environment: environment, logPath: testbed.directory.appendingPathComponent("herald.log").path)

            let answer = try await Self.waitForReadiness(port: httpPort) { _, body in body.contains("postgres_unreachable") }
            #expect(answer.status == 503)
            #expect(answer.body.contains("postgres_unreachable"), "\(answer.body)")
            let log = try String(contentsOfFile: testbed.directory.appendingPathComponent("herald.log").path, encoding: .utf8)
            #expect(log.contains("sslUnsupported"), "postgres-nio refused the server without TLS")

            herald.send(SIGTERM)
            #expect(try await herald.waitForExit(timeout: .seconds(30)) == 0)
        }
    }

    /// A member that crashed stays in the group until its session times out, and the group
    /// cannot finish the rebalance that a new member's join starts before that: the new member
    /// polls, reaches PostgreSQL and APNs, and is still not ready until it has joined.
    @Test func heraldIsUnreadyUntilItHasJoinedItsConsumerGroup() async throws {
        let testbed = try HeraldTestbed()
        try await testbed.withMocks {
            var environment = try await testbed.heraldEnvironment(group: "herald-\(UUID().uuidString)")
            // The crashed member holds the group for one session: long enough for the second
            // instance (ready to answer in about a second) to be seen unready, short enough not to
            // idle the test (10 s took 23.6 s in all, 6 s about 15).
            environment["HERALD_KAFKA_SESSION_TIMEOUT_MS"] = "6000"
            environment["HERALD_KAFKA_MAX_POLL_INTERVAL_MS"] = "6000"
            _ = try await testbed.heraldConfiguration(group: "migrate-only")
            let logPath = testbed.directory.appendingPathComponent("herald.log").path

            let firstPort = try freePort()
            environment["HERALD_HTTP_PORT"] = String(firstPort)
            let first = try HeraldProcess(environment: environment, logPath: logPath)
            let firstReady = try await Self.waitForReadiness(port: firstPort) { status, _ in status == 200 }
            #expect(firstReady.status == 200, "\(firstReady.body)")
            first.send(SIGKILL)
            _ = try await first.waitForExit(timeout: .seconds(10))

            let secondPort = try freePort()
            environment["HERALD_HTTP_PORT"] = String(secondPort)
            let secondLog = logPath + ".second"
            let second = try HeraldProcess(environment: environment, logPath: secondLog)
            let joining = try await Self.waitForReadiness(port: secondPort) { status, body in
                status != nil && !body.contains("kafka_poll_failing")
            }
            let joined = try String(contentsOfFile: secondLog, encoding: .utf8).contains("partitions assigned")
            #expect(!joined, "the crashed member still held the group when the second one answered")
            #expect(joining.status == 503)
            #expect(joining.body == "not ready: kafka_group_not_joined\n")

            let ready = try await Self.waitForReadiness(port: secondPort) { status, _ in status == 200 }
            #expect(ready.status == 200, "ready once joined: \(ready.body)")
            #expect(try String(contentsOfFile: secondLog, encoding: .utf8).contains("partitions assigned"))

            second.send(SIGTERM)
            #expect(try await second.waitForExit(timeout: .seconds(30)) == 0)
        }
    }
}
