import Crypto
import DeviceTokenStore
import Foundation
import HeraldService
import KafkaTransport
import Logging
import MockAPNS
import ServiceLifecycle
import Testing

/// End to end on real parts: Tansu (Kafka protocol), PostgreSQL, and two mock APNs servers
/// (production and sandbox) over HTTP/2 + TLS, with Herald built exactly as `herald run` builds it.
@Suite(.timeLimit(.minutes(5)))
struct WalkingSkeletonTests {
    @Test func deliversEveryEventToEveryDeviceOnceAndDeadLettersInvalidJSON() async throws {
        let directory = try TestEnvironment.temporaryDirectory()
        let key = try TestProviderKey(directory: directory)
        let topics = try TestTopics()
        let bundleID = "com.example.shop.\(UUID().uuidString.prefix(8).lowercased())"
        let logger = Logger(label: "test")

        let production = MockAPNSServer(
            configuration: MockAPNSConfiguration(
                caCertificatePath: directory.appendingPathComponent("production-ca.pem").path,
                providerKeys: [key.keyID: key.privateKey.publicKey],
                teamID: key.teamID
            ),
            logger: logger
        )
        let sandbox = MockAPNSServer(
            configuration: MockAPNSConfiguration(
                caCertificatePath: directory.appendingPathComponent("sandbox-ca.pem").path,
                providerKeys: [key.keyID: key.privateKey.publicKey],
                teamID: key.teamID
            ),
            logger: logger
        )
        let mocks = ServiceGroup(services: [production, sandbox], logger: logger)

        try await withRunningServices(mocks) {
            let productionPort = try await production.listeningPort()
            let sandboxPort = try await sandbox.listeningPort()
            let caBundle = directory.appendingPathComponent("ca-bundle.pem").path
            let bundleText =
                try String(contentsOfFile: directory.appendingPathComponent("production-ca.pem").path, encoding: .utf8)
                + "\n" + String(contentsOfFile: directory.appendingPathComponent("sandbox-ca.pem").path, encoding: .utf8)
            try bundleText.write(toFile: caBundle, atomically: true, encoding: .utf8)

            var environment = topics.environment
            environment["HERALD_KAFKA_BROKERS"] = TestEnvironment.brokers
            environment["HERALD_KAFKA_GROUP"] = "herald-\(UUID().uuidString)"
            environment["HERALD_KAFKA_SESSION_TIMEOUT_MS"] = "6000"
            environment["HERALD_KAFKA_HEARTBEAT_INTERVAL_MS"] = "1000"
            environment["HERALD_POSTGRES_URL"] = TestEnvironment.postgresURL
            environment["HERALD_APNS_KEY_PATH"] = key.path
            environment["HERALD_APNS_KEY_ID"] = key.keyID
            environment["HERALD_APNS_TEAM_ID"] = key.teamID
            environment["HERALD_APNS_PRODUCTION_URL"] = "https://127.0.0.1:\(productionPort)"
            environment["HERALD_APNS_SANDBOX_URL"] = "https://127.0.0.1:\(sandboxPort)"
            environment["HERALD_APNS_CA_PATH"] = caBundle
            environment["HERALD_HTTP_PORT"] = "0"
            let configuration = try HeraldConfiguration(environment: environment)
            try await HeraldApplication.migrate(configuration: configuration, logger: logger)

            // 3 users x 2 devices; each user's second device is a sandbox device.
            let users = ["u-1", "u-2", "u-3"]
            let devices = users.flatMap { user in
                ["production", "sandbox"].map { (user: user, token: Self.randomToken(), environment: $0) }
            }
            let producer = try KafkaProducer(configuration: TestEnvironment.kafka, logger: logger)
            for device in devices {
                // Uppercase with spaces, as an app might send it: Herald normalises it.
                let sentToken = device.token.uppercased().enumerated().map { $0.offset % 8 == 7 ? "\($0.element) " : "\($0.element)" }.joined()
                try await producer.send(
                    KafkaOutgoingMessage(
                        topic: topics.tokens,
                        key: Array(device.token.utf8),
                        value: Array(
                            """
                            {"action":"register","user_id":"\(device.user)","token":"\(sentToken)","topic":"\(bundleID)",
                             "environment":"\(device.environment)","timestamp":"2026-11-21T10:00:00Z"}
                            """.utf8
                        )
                    )
                )
            }

            let herald = try HeraldApplication.makeServiceGroup(configuration: configuration, logger: logger)
            let eventCount = 50
            let expectedDeliveries = eventCount * devices.count
            let (results, deadLetters) = try await withRunningServices(herald) {
                // Wait until the registrations are in PostgreSQL, so no event races them.
                try await Self.waitForActiveTokens(configuration: configuration, bundleID: bundleID, users: users, count: devices.count)
                for index in 0..<eventCount {
                    if index == eventCount / 2 {
                        try await producer.send(
                            KafkaOutgoingMessage(topic: topics.requests, key: Array("bad".utf8), value: Array("{not json".utf8), headers: [KafkaHeader(key: "origin", text: "test")])
                        )
                    }
                    try await producer.send(
                        KafkaOutgoingMessage(
                            topic: topics.requests,
                            key: Array("event-\(index)".utf8),
                            value: Array(
                                """
                                {"id":"event-\(index)","user_ids":["u-1","u-2","u-3","u-1"],"topic":"\(bundleID)",
                                 "collapse_id":"c-\(index)","payload":{"aps":{"alert":{"title":"Shipped","body":"Order \(index)"}}}}
                                """.utf8
                            )
                        )
                    )
                }
                let reader = try TopicReader(topics: [topics.results, topics.deadLetters])
                let records = try await reader.read(timeout: .seconds(120)) { records in
                    records.filter { $0.topic == topics.results }.count >= expectedDeliveries
                        && records.contains { $0.topic == topics.deadLetters }
                }
                // Anything beyond the expected records would show up within a short grace period.
                let extra = try await reader.read(timeout: .seconds(2)) { _ in false }
                let all = records + extra
                return (all.filter { $0.topic == topics.results }, all.filter { $0.topic == topics.deadLetters })
            }

            // Exactly one delivered result per (event, device).
            let outcomes = results.compactMap(\.json)
            #expect(outcomes.count == expectedDeliveries)
            #expect(outcomes.allSatisfy { $0["status"] as? String == "delivered" })
            let pairs = Set(outcomes.compactMap { outcome -> String? in
                guard let event = outcome["event_id"] as? String, let token = outcome["token"] as? String else { return nil }
                return "\(event)|\(token)"
            })
            #expect(pairs.count == expectedDeliveries)
            #expect(outcomes.allSatisfy { $0["topic"] as? String == bundleID && $0["attempts"] as? Int == 1 })

            // Exactly one push per (event, device), each at its environment's host.
            for device in devices {
                let (right, wrong) = device.environment == "sandbox" ? (sandbox, production) : (production, sandbox)
                #expect(right.pushCount(token: device.token) == eventCount)
                #expect(wrong.pushCount(token: device.token) == 0)
            }
            #expect(production.repeatedAPNSIDCount == 0 && sandbox.repeatedAPNSIDCount == 0)
            let request = try #require(production.receivedRequests().first)
            #expect(request.header("apns-topic") == bundleID)
            #expect(request.header("apns-push-type") == "alert")
            #expect(request.header("apns-priority") == "10")
            #expect(request.header("apns-collapse-id")?.hasPrefix("c-") == true)

            // The invalid message is dead-lettered unchanged, with the reason headers.
            #expect(deadLetters.count == 1)
            let deadLetter = try #require(deadLetters.first)
            #expect(deadLetter.value == Array("{not json".utf8))
            #expect(deadLetter.key == Array("bad".utf8))
            #expect(deadLetter.header("herald-error") == "invalid_json")
            #expect(deadLetter.header("herald-source-topic") == topics.requests)
            #expect(deadLetter.header("origin") == "test")
            #expect(deadLetter.header("herald-error-detail")?.isEmpty == false)
        }
    }

    static func randomToken() -> String {
        (0..<32).map { _ in String(format: "%02x", UInt8.random(in: 0...255)) }.joined()
    }

    /// Polls the registry until `count` active tokens of `users` exist for `bundleID`.
    static func waitForActiveTokens(configuration: HeraldConfiguration, bundleID: String, users: [String], count: Int) async throws {
        try await HeraldApplication.withTokenStore(postgresURL: configuration.postgresURL, logger: Logger(label: "test")) { store in
            let clock = ContinuousClock()
            let deadline = clock.now + .seconds(60)
            while clock.now < deadline {
                let tokens = try await store.activeTokens(topic: bundleID, userIDs: users, environment: nil)
                if tokens.values.map(\.count).reduce(0, +) >= count { return }
                try await Task.sleep(for: .milliseconds(200))
            }
            throw TestFailure("the token registrations did not reach PostgreSQL within 60 s")
        }
    }
}
