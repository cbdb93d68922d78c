import APNSCore
import PushCore
import PushStores
import Foundation
import HeraldService
import KafkaMessages
import KafkaTransport
import MockAPNS
import MockFCM
import PostgresStores
import PushPipeline
import Testing

/// Android devices through FCM against the real `herald`, Tansu, PostgreSQL, the mock APNs and
/// the mock FCM, configured only through HERALD_FCM_*: one event reaches a user's devices on both
/// platforms with one result each; an UNREGISTERED answer marks the token and publishes
/// push.unregistered with `platform: fcm`, and a registration sent after that request keeps the
/// token; a 503 with Retry-After is retried after the time asked; an access token that expires
/// mid-run is refreshed with no failed notification.
@Suite(.timeLimit(.minutes(5)))
struct AndroidDeliveryIntegrationTests {
    static func pixel(_ name: String) -> String { "\(name):APA91b_" + UUID().uuidString + "-Pixel" }

    @Test func oneEventReachesBothPlatformsAndAnUnregisteredAndroidTokenIsMarkedUntilRegisteredAgain() async throws {
        let testbed = try HeraldTestbed()
        let iPhone = TestDevice(user: "alice", token: TestDevice.randomToken(), environment: "production")
        let (alicePixel, davePixel, erinPixel) = (Self.pixel("alice"), Self.pixel("dave"), Self.pixel("erin"))
        try await testbed.withMocks {
            let (environment, httpPort) = try await testbed.heraldEnvironmentServingHTTP(group: "herald-\(UUID().uuidString)")
            let herald = try await testbed.startHerald(environment)
            _ = try await ReadinessTests.waitForReadiness(port: httpPort) { status, _ in status == 200 }
            try await testbed.register([iPhone])
            for (user, token) in [("alice", alicePixel), ("dave", davePixel), ("erin", erinPixel)] {
                try await testbed.registerAndroid(user: user, token: token, at: "2026-11-21T10:00:00Z")
            }
            try await testbed.waitForActiveDevices(users: ["alice", "dave", "erin"], count: 4)
            testbed.fcm.markUnregistered(token: davePixel)
            testbed.fcm.script(token: erinPixel, [.unavailable(retryAfterSeconds: 1)])

            let published = WallClock.millisecondsSince1970()
            try await testbed.publishMixedEvent(id: "order-1", users: ["alice", "dave", "erin"])
            let reader = try TopicReader(topics: [testbed.topics.results, testbed.topics.unregistered])
            var records = try await reader.read(timeout: .seconds(60)) { records in
                records.filter { $0.topic == testbed.topics.results }.count >= 4 && records.contains { $0.topic == testbed.topics.unregistered }
            }
            let results = records.filter { $0.topic == testbed.topics.results }.compactMap(\.json)
            #expect(results.count == 4, "one result per device: \(results)")
            func result(_ token: String) -> [String: Any]? { results.first { $0["token"] as? String == token } }
            #expect(result(iPhone.token)?["platform"] as? String == "apns")
            #expect(result(iPhone.token)?["status"] as? String == "delivered")
            #expect(result(alicePixel)?["platform"] as? String == "fcm")
            #expect(result(alicePixel)?["status"] as? String == "delivered")
            #expect(result(alicePixel)?["topic"] as? String == testbed.fcmPackage)
            #expect((result(alicePixel)?["fcm_message_id"] as? String)?.hasPrefix("projects/\(testbed.fcmProjectID)/messages/") == true)
            #expect(result(davePixel)?["status"] as? String == "unregistered")
            #expect(result(davePixel)?["reason"] as? String == "UNREGISTERED")
            let erin = try #require(result(erinPixel))
            #expect(erin["status"] as? String == "delivered" && erin["attempts"] as? Int == 2, "retried after a 503: \(erin)")
            #expect(erin["latency_ms"] as? Int ?? 0 >= 1_000, "not before the Retry-After of 1 s")
            let unregistered = try #require(records.first { $0.topic == testbed.topics.unregistered }?.json)
            #expect(unregistered["platform"] as? String == "fcm")
            #expect(unregistered["token"] as? String == davePixel)
            #expect(unregistered["topic"] as? String == testbed.fcmPackage)
            let unregisteredAt = try #require(unregistered["unregistered_at"] as? String)
            #expect(testbed.fcm.deliveredCount(token: alicePixel) == 1 && testbed.fcm.deliveredCount(token: erinPixel) == 1)

            // Dave's token is marked; a registration sent after that request keeps it again.
            #expect(try await testbed.activeDevices(users: ["dave"]).isEmpty)
            try await testbed.registerAndroid(user: "dave", token: davePixel, at: RFC3339.format(milliseconds: WallClock.millisecondsSince1970() + 1_000))
            try await testbed.waitForActiveDevices(users: ["dave"], count: 1)
            #expect(published <= (RFC3339.parse(unregisteredAt)?.millisecondsSince1970 ?? 0), "dated when the request was sent")

            // Every access token expires mid-run: the next notifications still go out, none fails.
            let exchanges = testbed.fcm.tokenExchangeCount
            testbed.fcm.expireAccessTokens()
            try await testbed.publishMixedEvent(id: "order-2", users: ["alice", "erin"])
            records = try await reader.read(timeout: .seconds(60)) { records in
                records.compactMap(ResultRecord.init).filter { $0.eventID == "order-2" }.count >= 3
            }
            let second = records.compactMap(ResultRecord.init).filter { $0.eventID == "order-2" }
            #expect(second.count == 3 && second.allSatisfy { $0.status == "delivered" }, "\(second.map(\.status))")
            #expect(testbed.fcm.tokenExchangeCount > exchanges, "a new access token was exchanged")

            herald.send(SIGTERM)
            #expect(try await herald.waitForExit(timeout: .seconds(30)) == 0)
        }
    }
}

extension AndroidDeliveryIntegrationTests {
    /// FCM's refusals as Herald reads them, by the FcmError detail: INVALID_ARGUMENT about the
    /// registration token is `unregistered` (and marks it); a 403 without FcmError (the API disabled for the
    /// project) is `rejected` and marks nothing.
    @Test func refusalsAreReadByTheirDetailNotTheirStatus() async throws {
        let invalid = Self.pixel("invalid")
        let valid = Self.pixel("valid")
        let testbed = try HeraldTestbed(fcmInvalidTokens: [invalid])
        try await testbed.withMocks {
            let herald = try await testbed.startHerald(try await testbed.heraldEnvironment(group: "herald-\(UUID().uuidString)"))
            for (user, token) in [("ivan", invalid), ("vera", valid)] {
                try await testbed.registerAndroid(user: user, token: token, at: "2026-11-21T10:00:00Z")
            }
            try await testbed.waitForActiveDevices(users: ["ivan", "vera"], count: 2)
            try await testbed.publishMixedEvent(id: "refusals-1", users: ["ivan", "vera"])
            let records = try await TopicReader(topics: [testbed.topics.results]).read(timeout: .seconds(60)) {
                $0.compactMap(ResultRecord.init).count >= 2
            }
            let results = records.compactMap(\.json)
            #expect(results.first { $0["token"] as? String == invalid }?["status"] as? String == "unregistered")
            #expect(results.first { $0["token"] as? String == valid }?["status"] as? String == "delivered")
            #expect(try await testbed.activeDevices(users: ["ivan"]).isEmpty, "INVALID_ARGUMENT about the registration token marks it")
            herald.send(SIGTERM)
            #expect(try await herald.waitForExit(timeout: .seconds(30)) == 0)
        }

        // The FCM API disabled for the project: 403 without FcmError, rejected, the token kept.
        let disabled = try HeraldTestbed(fcmDisabled: true)
        try await disabled.withMocks {
            let herald = try await disabled.startHerald(try await disabled.heraldEnvironment(group: "herald-\(UUID().uuidString)"))
            try await disabled.registerAndroid(user: "wes", token: valid, at: "2026-11-21T10:00:00Z")
            try await disabled.waitForActiveDevices(users: ["wes"], count: 1)
            try await disabled.publishMixedEvent(id: "refusals-2", users: ["wes"])
            let records = try await TopicReader(topics: [disabled.topics.results]).read(timeout: .seconds(60)) {
                $0.compactMap(ResultRecord.init).contains { $0.eventID == "refusals-2" }
            }
            let result = records.compactMap(\.json).first { $0["event_id"] as? String == "refusals-2" }
            #expect(result?["status"] as? String == "rejected", "\(String(describing: result))")
            #expect(result?["fcm_status"] as? Int == 403)
            #expect(try await disabled.activeDevices(users: ["wes"]).count == 1, "a refusal without FcmError marks nothing")
            herald.send(SIGTERM)
            #expect(try await herald.waitForExit(timeout: .seconds(30)) == 0)
        }
    }

    /// An Android-only deployment: FCM configured, no APNs credential at all. Herald starts and
    /// becomes ready, delivers to Android devices, and answers an event's Apple devices with a
    /// `rejected` result (NoCredentialForTopic), never connecting to APNs.
    @Test func anAndroidOnlyDeploymentNeedsNoAPNsCredential() async throws {
        let testbed = try HeraldTestbed()
        let iPhone = TestDevice(user: "alice", token: TestDevice.randomToken(), environment: "production")
        let pixel = Self.pixel("alice")
        try await testbed.withMocks {
            var (environment, httpPort) = try await testbed.heraldEnvironmentServingHTTP(group: "herald-\(UUID().uuidString)")
            for key in environment.keys where key.hasPrefix("HERALD_APNS_") { environment[key] = nil }
            let herald = try await testbed.startHerald(environment)
            let ready = try await ReadinessTests.waitForReadiness(port: httpPort) { status, _ in status == 200 }
            #expect(ready.status == 200, "\(ready.body)")
            try await testbed.register([iPhone])
            try await testbed.registerAndroid(user: "alice", token: pixel, at: "2026-11-21T10:00:00Z")
            try await testbed.waitForActiveDevices(users: ["alice"], count: 2)
            try await testbed.publishMixedEvent(id: "order-android-only", users: ["alice"])
            let reader = try TopicReader(topics: [testbed.topics.results])
            let results = try await reader.read(timeout: .seconds(60)) { $0.count >= 2 }.compactMap(\.json)
            func result(_ token: String) -> [String: Any]? { results.first { $0["token"] as? String == token } }
            #expect(result(pixel)?["status"] as? String == "delivered")
            #expect(result(iPhone.token)?["status"] as? String == "rejected")
            #expect(result(iPhone.token)?["reason"] as? String == "NoCredentialForTopic")
            #expect(testbed.production.receivedRequests().isEmpty && testbed.production.acceptedConnectionCount == 0)
            herald.send(SIGTERM)
            #expect(try await herald.waitForExit(timeout: .seconds(30)) == 0)
        }
    }
}

extension HeraldTestbed {
    /// Registers an Android device of `user` for ``fcmPackage`` through push.tokens.
    func registerAndroid(user: String, token: String, at timestamp: String) async throws {
        try await producer.send(
            KafkaOutgoingMessage(
                topic: topics.tokens,
                key: Array(token.utf8),
                value: Array(
                    #"{"action":"register","user_id":"\#(user)","token":"\#(token)","topic":"\#(fcmPackage)","platform":"fcm","timestamp":"\#(timestamp)"}"#
                        .utf8
                )
            )
        )
    }

    /// The active devices of `users` on both platforms.
    func activeDevices(users: [String]) async throws -> [String: [DeviceToken]] {
        try await HeraldApplication.withTokenStore(postgresURL: try PostgresURL(TestEnvironment.postgresURL), logger: logger) { store in
            try await store.activeDevices(apnsTopic: bundleID, fcmPackage: fcmPackage, userIDs: users)
        }
    }

    /// Waits until PostgreSQL has `count` active devices of `users` on both platforms.
    func waitForActiveDevices(users: [String], count: Int) async throws {
        let clock = ContinuousClock()
        let deadline = clock.now + .seconds(60)
        while clock.now < deadline {
            if try await activeDevices(users: users).values.map(\.count).reduce(0, +) == count { return }
            try await Task.sleep(for: .milliseconds(200))
        }
        throw TestFailure("\(count) active devices of \(users) did not reach PostgreSQL within 60 s")
    }

    /// Publishes an event for `users`' Apple devices and Android ones.
    func publishMixedEvent(id: String, users: [String]) async throws {
        let list = users.map { "\"\($0)\"" }.joined(separator: ",")
        try await producer.send(
            KafkaOutgoingMessage(
                topic: topics.requests,
                key: Array(id.utf8),
                value: Array(
                    """
                    {"id":"\(id)","user_ids":[\(list)],"topic":"\(bundleID)","payload":{"aps":{"alert":"Shipped"}},
                     "fcm":{"package":"\(fcmPackage)","message":{"notification":{"title":"Shipped"},"data":{"order":"\(id)"}}}}
                    """.utf8
                )
            )
        )
    }
}
