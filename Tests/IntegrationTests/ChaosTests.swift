import Foundation
import HeraldService
import KafkaTransport
import MockAPNS
import PushPipeline
import Testing

/// Crashes, restarts and graceful stops of the real `herald` process on real services.
@Suite(.timeLimit(.minutes(10)), .serialized)
struct ChaosTests {
    /// How far a scenario got.
    struct Progress {
        /// Distinct outcomes read; seconds behind Herald (the reader's group join alone takes 3 s).
        var outcomes: Int
        /// Pushes the mock APNs accepted, repeats included, as they happen: a disruption meant to
        /// find Herald mid-run waits for these.
        var pushes: Int
    }

    /// Publishes `events` events to every device of `users`, runs Herald as a child process,
    /// and calls `disrupt` with the progress so far, on each poll. Returns the result records
    /// once every (event, device) has an outcome.
    static func runScenario(
        testbed: HeraldTestbed,
        users: [String],
        devices: [TestDevice],
        events: Int,
        timeout: Duration = .seconds(400),
        extraEnvironment: [String: String] = [:],
        disrupt: (_ progress: Progress, _ herald: inout HeraldProcess) async throws -> Void
    ) async throws -> [ResultRecord] {
        let environment = try await testbed.heraldEnvironment(group: "herald-\(UUID().uuidString)")
            .merging(extraEnvironment) { $1 }
        _ = try await testbed.heraldConfiguration(group: "migrate-only")
        let logPath = testbed.directory.appendingPathComponent("herald.log").path
        var herald = try HeraldProcess(environment: environment, logPath: logPath)
        try await testbed.register(devices)
        try await testbed.waitForActiveTokens(users: users, count: devices.count)
        // Published while the loop below watches: Herald pushes as the events come, and the
        // disruption lands mid-run however fast it pushes.
        async let published: Void = {
            for index in 0..<events {
                try await testbed.publishEvent(id: "\(testbed.bundleID)-event-\(index)", users: users)
            }
        }()
        let expected = events * devices.count
        let reader = try TopicReader(topics: [testbed.topics.results])
        var results: [ResultRecord] = []
        var keys = Set<String>()
        let clock = ContinuousClock()
        let deadline = clock.now + timeout
        while keys.count < expected, clock.now < deadline {
            let batch = try await reader.consumer.poll(maxMessages: 5000, timeout: .milliseconds(200)).compactMap(ResultRecord.init)
            results += batch
            keys.formUnion(batch.map(\.key))
            if !batch.isEmpty { print("progress \(clock.now): \(keys.count) outcomes") }
            let pushes = testbed.production.totalAcceptedPushes + testbed.sandbox.totalAcceptedPushes
            try await disrupt(Progress(outcomes: keys.count, pushes: pushes), &herald)
        }
        try await published
        results += try await reader.read(timeout: .seconds(2)) { _ in false }.compactMap(ResultRecord.init)
        herald.send(SIGTERM)
        _ = try await herald.waitForExit(timeout: .seconds(30))
        return results
    }

    /// Every (event, device) pushed exactly once and one distinct outcome per (event, device).
    ///
    /// `crashes` SIGKILLs may each repeat the pushes that were in flight: APNs had answered
    /// (or was answering) but the outcome was not yet in the ledger. Those repeats must stay
    /// within the in-flight bound and be visible by their repeated apns-id.
    @discardableResult
    static func expectExactlyOnce(
        testbed: HeraldTestbed,
        devices: [TestDevice],
        events: Int,
        results: [ResultRecord],
        crashes: Int = 0
    ) -> Int {
        let byKey = Dictionary(grouping: results, by: \.key)
        #expect(byKey.count == events * devices.count, "every (event, device) has an outcome")
        #expect(byKey.values.allSatisfy { Set($0.map(\.value)).count == 1 }, "repeats only as identical copies")
        #expect(results.allSatisfy { $0.status == "delivered" }, "\(Dictionary(grouping: results, by: \.status).mapValues(\.count))")
        let pushes = devices.map { testbed.pushCounts($0) }
        #expect(pushes.allSatisfy { $0.wrong == 0 })
        let missing = pushes.filter { $0.right < events }.count
        let repeated = pushes.map { max(0, $0.right - events) }.reduce(0, +)
        #expect(missing == 0, "every device got every event")
        let repeatedIDs = testbed.production.repeatedAPNSIDCount + testbed.sandbox.repeatedAPNSIDCount
        print("exactly-once check: \(crashes) crashes, \(repeated) second pushes, \(repeatedIDs) repeated apns-ids")
        #expect(repeated == repeatedIDs, "every repeat carries the same apns-id")
        // Each send holds a permit until its outcome is in the ledger (docs/ledger.md, "The crash window").
        #expect(repeated <= crashes * PipelineConfiguration().maxConcurrentSends, "repeats bounded by the send permits")
        if crashes == 0 { #expect(repeated == 0, "second pushes at the mock") }
        return repeated
    }

    /// Runs a scenario over `userCount` users with two devices each and checks exactly-once.
    static func exactlyOnce(
        users userCount: Int,
        events: Int,
        extraEnvironment: [String: String] = [:],
        disrupt: (_ progress: Progress, _ expected: Int, _ herald: inout HeraldProcess) async throws -> Void
    ) async throws {
        let testbed = try HeraldTestbed(partitions: 4)
        try await testbed.withMocks {
            let users = (0..<userCount).map { "user-\($0)" }
            let devices = TestDevice.twoPerUser(users)
            let expected = events * devices.count
            let results = try await runScenario(
                testbed: testbed,
                users: users,
                devices: devices,
                events: events,
                extraEnvironment: extraEnvironment
            ) { progress, herald in try await disrupt(progress, expected, &herald) }
            expectExactlyOnce(testbed: testbed, devices: devices, events: events, results: results)
        }
    }

    @Test func sigtermMidRunExitsZeroWithin30SecondsAndARestartLosesNothing() async throws {
        var stopped = false
        // Fewer permits than the default slow Herald down enough (a few thousand pushes a
        // second) that the reader, polling every 200 ms, finds it mid-run.
        try await Self.exactlyOnce(users: 25, events: 400, extraEnvironment: ["HERALD_MAX_CONCURRENT_SENDS": "200"]) {
            progress, expected, herald in
            guard !stopped, progress.pushes >= expected / 3 else { return }
            stopped = true
            #expect(progress.pushes < expected, "SIGTERM while pushes were still going on")
            herald.send(SIGTERM)
            #expect(try await herald.waitForExit(timeout: .seconds(30)) == 0)
            herald = try HeraldProcess(environment: herald.environment, logPath: herald.logPath)
        }
        #expect(stopped)
    }

    /// Runs ``exactlyOnce(users:events:extraEnvironment:disrupt:)`` through a 10 s outage:
    /// `scripts/services.sh stop` once a fifth of the notifications are pushed, `start` 10 s later.
    /// Both happen in the scenario's poll loop, one short step per poll, so the result reader
    /// keeps polling (and keeps its group membership) through the outage; `whileDown` is called on
    /// each poll meanwhile with the time since the service went.
    static func exactlyOnceThroughOutage(
        events: Int,
        stop: String,
        start: String,
        extraEnvironment: [String: String] = [:],
        whileDown: (Duration) async throws -> Void = { _ in },
        afterRestart: () async throws -> Void = {}
    ) async throws {
        let clock = ContinuousClock()
        var stoppedAt: ContinuousClock.Instant?
        var restarted = false
        // The service must run again for the suites after this one, whatever happens here.
        defer {
            if stoppedAt != nil, !restarted { try? LocalServices.runBlocking(start) }
        }
        try await exactlyOnce(users: 25, events: events, extraEnvironment: extraEnvironment) { progress, expected, _ in
            if stoppedAt == nil, progress.pushes >= expected / 5 {
                try await LocalServices.run(stop)
                stoppedAt = clock.now
            } else if let stoppedAt, !restarted {
                let down = clock.now - stoppedAt
                if down >= .seconds(10) {
                    try await LocalServices.run(start)
                    restarted = true
                } else {
                    try await whileDown(down)
                }
            } else if restarted {
                try await afterRestart()
            }
        }
        #expect(restarted, "\(stop) and \(start) both came mid-run")
    }

    @Test func postgresStoppedForTenSecondsLosesNothingAndReportsUnready() async throws {
        var readyDuringOutage: (status: Int, body: String)?
        var readyAfterOutage = false
        let httpPort = try freePort()
        try await Self.exactlyOnceThroughOutage(
            events: 400,
            stop: "pg-stop",
            start: "pg-start",
            extraEnvironment: ["HERALD_HTTP_PORT": String(httpPort)]
        ) { down in
            if readyDuringOutage == nil, down >= .seconds(3) {
                readyDuringOutage = httpGet(port: httpPort, path: "/health/ready")
                #expect(httpStatus(port: httpPort, path: "/health/live") == 200)
            }
        } afterRestart: {
            // Herald reconnects with backoff: wait for it here, before the run can end.
            let clock = ContinuousClock()
            let deadline = clock.now + .seconds(30)
            while !readyAfterOutage, clock.now < deadline {
                readyAfterOutage = httpStatus(port: httpPort, path: "/health/ready") == 200
                if !readyAfterOutage { try await Task.sleep(for: .milliseconds(200)) }
            }
        }
        #expect(readyDuringOutage?.status == 503, "unready while PostgreSQL is down")
        #expect(readyDuringOutage?.body.contains("postgres_unreachable") == true, "\(readyDuringOutage?.body ?? "")")
        #expect(readyAfterOutage, "ready again once PostgreSQL is back")
    }

    /// Every client reaches Tansu through the local proxy; stopping it drops all their
    /// connections while the broker keeps its data, like a network partition.
    @Test func brokerUnreachableForTenSecondsLosesNothingAndPushesNothingTwice() async throws {
        try await Self.exactlyOnceThroughOutage(events: 200, stop: "broker-cut", start: "broker-restore")
    }

    /// Both rebalance protocols: eager (range: every partition is revoked, then reassigned) and
    /// cooperative (cooperative-sticky: only the partitions that move are revoked).
    @Test(arguments: ["range", "cooperative-sticky"])
    func secondInstanceJoinsThenFirstLeavesLosingNothingPushingNothingTwice(assignmentStrategy: String) async throws {
        var second: HeraldProcess?
        var firstLeft = false
        let strategy = ["HERALD_KAFKA_PARTITION_ASSIGNMENT_STRATEGY": assignmentStrategy]
        // On outcomes read, which lag the pushes: on pushes, the first instance would leave
        // before the rebalance that the second one's join starts, which it must log.
        try await Self.exactlyOnce(users: 25, events: 100, extraEnvironment: strategy) { progress, expected, herald in
            if second == nil, progress.outcomes >= expected / 5 {
                second = try HeraldProcess(environment: herald.environment, logPath: herald.logPath + ".second")
            }
            if !firstLeft, progress.outcomes >= expected / 2 {
                firstLeft = true
                let log = try String(contentsOfFile: herald.logPath, encoding: .utf8)
                let rebalanceProtocol = assignmentStrategy == "range" ? "EAGER" : "COOPERATIVE"
                #expect(log.contains("kafka.rebalance_protocol=\(rebalanceProtocol)"), "rebalanced with \(rebalanceProtocol)")
                herald.send(SIGTERM)
                #expect(try await herald.waitForExit(timeout: .seconds(30)) == 0)
                herald = try #require(second)
            }
        }
        #expect(firstLeft)
    }

    /// Scale-out: three members of one group over 12 partitions split them and together push
    /// every notification once.
    @Test func threeInstancesSplitTwelvePartitionsAndDeliverEverythingOnce() async throws {
        let testbed = try HeraldTestbed(partitions: 12)
        try await testbed.withMocks {
            let users = (0..<30).map { "user-\($0)" }
            let devices = TestDevice.twoPerUser(users)
            // Enough work (60,000 notifications) that it is still going when the others join.
            let events = 1000
            var others: [HeraldProcess] = []
            let results = try await Self.runScenario(testbed: testbed, users: users, devices: devices, events: events) {
                _, herald in
                guard others.isEmpty else { return }
                for index in 1...2 {
                    others.append(try HeraldProcess(environment: herald.environment, logPath: herald.logPath + ".\(index)"))
                }
            }
            for other in others {
                other.send(SIGTERM)
                #expect(try await other.waitForExit(timeout: .seconds(30)) == 0)
            }
            Self.expectExactlyOnce(testbed: testbed, devices: devices, events: events, results: results)
            // Each member was assigned request partitions at some point.
            let logPath = testbed.directory.appendingPathComponent("herald.log").path
            for path in [logPath, logPath + ".1", logPath + ".2"] {
                let assignments = try String(contentsOfFile: path, encoding: .utf8)
                    .split(separator: "\n")
                    .filter { $0.contains("partitions assigned") && $0.contains(testbed.topics.requests + "[") }
                #expect(!assignments.isEmpty, "\(path) was assigned request partitions")
            }
        }
    }

    @Test func sigkillTwiceMidRunLosesNothingAndRepeatsOnlyWhatWasInFlight() async throws {
        let testbed = try HeraldTestbed(partitions: 4)
        try await testbed.withMocks {
            let users = (0..<50).map { "user-\($0)" }
            let devices = TestDevice.twoPerUser(users)
            let events = Int(ProcessInfo.processInfo.environment["HERALD_CHAOS_EVENTS"] ?? "200")!
            var kills = 0
            var pushesAtRestart = 0
            let clock = ContinuousClock()
            // Since the current process pushed its first notification: the push rate at a kill.
            var since: (time: ContinuousClock.Instant, pushes: Int)?
            var ratesAtKill: [Int] = []
            let results = try await Self.runScenario(testbed: testbed, users: users, devices: devices, events: events) {
                progress, herald in
                // Kill once a sixth is pushed, and again once the restarted process pushed 1,000 more.
                let pushes = progress.pushes
                if since == nil, pushes > pushesAtRestart { since = (clock.now, pushes) }
                let threshold = kills == 0 ? events * devices.count / 6 : max(events * devices.count / 2, pushesAtRestart + 1000)
                guard kills < 2, pushes >= threshold, let start = since else { return }
                let elapsed = clock.now - start.time
                let rate = elapsed > .zero ? Int(Double(pushes - start.pushes) / (elapsed / .seconds(1))) : 0
                herald.send(SIGKILL)
                #expect(try await herald.waitForExit(timeout: .seconds(10)) != nil)
                kills += 1
                pushesAtRestart = pushes
                since = nil
                ratesAtKill.append(rate)
                print("SIGKILL \(kills) after \(pushes) pushes, at \(rate) pushes/s")
                herald = try HeraldProcess(environment: herald.environment, logPath: herald.logPath)
            }
            #expect(kills == 2)
            let repeated = Self.expectExactlyOnce(testbed: testbed, devices: devices, events: events, results: results, crashes: kills)
            print(
                "crash window: \(repeated) repeats over \(kills) crashes (\(Double(repeated) / Double(max(kills, 1))) per crash) at \(ratesAtKill) pushes/s; bound \(PipelineConfiguration().maxConcurrentSends) per crash"
            )
        }
    }
}
