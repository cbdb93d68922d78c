import KafkaMessages
import PushStores
import Foundation
import HeraldService
import KafkaTransport
import MockAPNS
import PushPipeline
import Testing

/// The contract's finer points on real parts, through `herald run` and its documented
/// configuration: exact timestamps from push.tokens and APNs' 410 to PostgreSQL and back, the
/// app's payload forwarded with its NUL escapes, derived collapse IDs, and a dead letter larger
/// than the broker takes.
@Suite(.timeLimit(.minutes(5)))
struct ContractDetailsTests {
    /// 2026-11-21T10:00:40.748Z, which `Double` seconds stored as …40.747999.
    static let registeredAt: Int64 = 1_795_255_240_748
    /// 2026-11-21T10:01:40.123Z, APNs' 410 timestamp for the gone device.
    static let unregisteredAt: Int64 = 1_795_255_300_123

    @Test func timestampsAreExactPayloadsForwardedCollapseIDsDerivedAndOversizedDeadLettersSentWithoutValue() async throws {
        let phone = TestDevice(user: "u-1", token: TestDevice.randomToken(), environment: "production")
        let gone = TestDevice(user: "u-1", token: TestDevice.randomToken(), environment: "production")
        let otherPhone = TestDevice(user: "u-2", token: TestDevice.randomToken(), environment: "production")
        let testbed = try HeraldTestbed(unregisteredTokens: [gone.token: Self.unregisteredAt])
        let topics = testbed.topics
        try await testbed.withMocks {
            var environment = try await testbed.heraldEnvironment(group: "herald-\(UUID().uuidString)")
            environment["HERALD_APNS_DERIVED_COLLAPSE_ID"] = "true"
            // librdkafka's message.max.bytes: results fit, the dead letter below does not.
            environment["HERALD_KAFKA_MESSAGE_MAX_BYTES"] = "2000"
            let herald = try await testbed.startHerald(environment)

            try await testbed.register([gone, otherPhone])
            try await testbed.producer.send(
                KafkaOutgoingMessage(
                    topic: topics.tokens,
                    key: Array(phone.token.utf8),
                    value: Array(
                        #"{"action":"register","user_id":"u-1","token":"\#(phone.token)","topic":"\#(testbed.bundleID)","timestamp":"2026-11-21T10:00:40.748Z"}"#
                            .utf8
                    )
                )
            )
            try await testbed.waitForActiveTokens(users: ["u-1", "u-2"], count: 3)

            let nulEvent = "\(testbed.bundleID)-nul"
            let ownCollapseEvent = "\(testbed.bundleID)-own"
            try await testbed.producer.send(
                KafkaOutgoingMessage(
                    topic: topics.requests,
                    key: Array(nulEvent.utf8),
                    value: Array(#"{"id":"\#(nulEvent)","user_ids":["u-1"],"topic":"\#(testbed.bundleID)","payload":{"aps":{"alert":"a\u0000b"}}}"#.utf8)
                )
            )
            try await testbed.producer.send(
                KafkaOutgoingMessage(
                    topic: topics.requests,
                    key: Array(ownCollapseEvent.utf8),
                    value: Array(
                        #"{"id":"\#(ownCollapseEvent)","user_ids":["u-2"],"topic":"\#(testbed.bundleID)","collapse_id":"mine","payload":{"aps":{"badge":1}}}"#
                            .utf8
                    )
                )
            )
            let oversized = [UInt8](repeating: UInt8(ascii: "{"), count: 3000)
            try await testbed.producer.send(KafkaOutgoingMessage(topic: topics.requests, key: Array("oversized".utf8), value: oversized))

            let reader = try TopicReader(topics: [topics.results, topics.unregistered, topics.deadLetters])
            let records = try await reader.read(timeout: .seconds(120)) { records in
                records.filter { $0.topic == topics.results }.count >= 3
                    && records.contains { $0.topic == topics.unregistered } && records.contains { $0.topic == topics.deadLetters }
            }
            let results = Dictionary(
                records.filter { $0.topic == topics.results }.compactMap(ResultRecord.init).map { ($0.key, $0.status) }
            ) { first, _ in first }
            #expect(
                results == [
                    "\(nulEvent)|\(phone.token)": "delivered", "\(nulEvent)|\(gone.token)": "unregistered",
                    "\(ownCollapseEvent)|\(otherPhone.token)": "delivered",
                ]
            )

            // The app's payload reached APNs with its NUL; the collapse IDs are the event's own or derived.
            let requests = testbed.production.receivedRequests()
            let phoneRequest = try #require(requests.first { $0.token == phone.token })
            let payload = try #require(try JSONSerialization.jsonObject(with: Data(phoneRequest.payload)) as? [String: Any])
            #expect((payload["aps"] as? [String: Any])?["alert"] as? String == "a\u{0}b")
            #expect(phoneRequest.header("apns-collapse-id") == NotificationID.collapseID(eventID: nulEvent))
            #expect(requests.first { $0.token == otherPhone.token }?.header("apns-collapse-id") == "mine")

            // Timestamps: exact in PostgreSQL and on push.unregistered.
            let (phoneRow, goneRow) = try await RegistryDatabase.withStore { _, database in
                (try await database.row(testbed.bundleID, phone.token), try await database.row(testbed.bundleID, gone.token))
            }
            #expect(phoneRow?.registeredAt == Timestamp(millisecondsSince1970: Self.registeredAt))
            #expect(goneRow?.unregisteredAt == Timestamp(millisecondsSince1970: Self.unregisteredAt))
            let unregistered = try #require(records.first { $0.topic == topics.unregistered }?.json)
            #expect(unregistered["unregistered_at"] as? String == "2026-11-21T10:01:40.123Z")
            #expect(unregistered["token"] as? String == gone.token)

            // The dead letter did not fit the broker: it went without its value, saying so.
            let deadLetter = try #require(records.first { $0.topic == topics.deadLetters })
            #expect(deadLetter.value == nil || deadLetter.value == [])
            #expect(deadLetter.header("herald-value-omitted") == "too_large")
            #expect(deadLetter.header("herald-error") == "invalid_json")

            herald.send(SIGTERM)
            #expect(try await herald.waitForExit(timeout: .seconds(30)) == 0)
        }
    }

    /// iOS 18 control widgets: `push_type` `controls` goes out with its own topic suffix.
    @Test func aControlsPushCarriesItsTopicSuffix() async throws {
        let phone = TestDevice(user: "u-1", token: TestDevice.randomToken(), environment: "production")
        let testbed = try HeraldTestbed()
        try await testbed.withMocks {
            let herald = try await testbed.startHerald(try await testbed.heraldEnvironment(group: "herald-\(UUID().uuidString)"))
            try await testbed.register([phone])
            try await testbed.waitForActiveTokens(users: ["u-1"], count: 1)
            try await testbed.producer.send(
                KafkaOutgoingMessage(
                    topic: testbed.topics.requests,
                    key: Array("e-controls".utf8),
                    value: Array(
                        #"{"id":"e-controls","user_ids":["u-1"],"topic":"\#(testbed.bundleID)","push_type":"controls","payload":{"aps":{"content-changed":true}}}"#
                            .utf8
                    )
                )
            )
            let reader = try TopicReader(topics: [testbed.topics.results])
            let records = try await reader.read(timeout: .seconds(120)) { !$0.isEmpty }
            #expect(records.first?.json?["status"] as? String == "delivered")
            let request = try #require(testbed.production.receivedRequests().first { $0.token == phone.token })
            #expect(request.header("apns-push-type") == "controls")
            #expect(request.header("apns-topic") == "\(testbed.bundleID).push-type.controls")
            herald.send(SIGTERM)
            #expect(try await herald.waitForExit(timeout: .seconds(30)) == 0)
        }
    }

    @Test func aFailedResultWithoutAnAPNsAnswerNamesTheTransportCause() async throws {
        let phone = TestDevice(user: "u-1", token: TestDevice.randomToken(), environment: "production")
        let tablet = TestDevice(user: "u-1", token: TestDevice.randomToken(), environment: "sandbox")
        let testbed = try HeraldTestbed()
        try await testbed.withMocks {
            var environment = try await testbed.heraldEnvironment(group: "herald-\(UUID().uuidString)")
            // Only the system's CA roots: the mock's own CA is not trusted, so its handshake fails.
            environment["HERALD_APNS_CA_PATH"] = nil
            // Nothing listens on port 1: the connection is refused.
            environment["HERALD_APNS_SANDBOX_URL"] = "https://127.0.0.1:1"
            environment["HERALD_RETRY_MAX_ATTEMPTS"] = "2"
            let herald = try await testbed.startHerald(environment)
            try await testbed.register([phone, tablet])
            try await testbed.waitForActiveTokens(users: ["u-1"], count: 2)
            try await testbed.publishEvent(id: "e-transport", users: ["u-1"])

            let reader = try TopicReader(topics: [testbed.topics.results])
            let records = try await reader.read(timeout: .seconds(120)) { $0.count >= 2 }
            let results = Dictionary(
                uniqueKeysWithValues: records.compactMap { record in
                    record.json.map { (($0["token"] as? String) ?? "-", $0) }
                })
            for (device, reason) in [(phone, "TLSHandshakeFailed"), (tablet, "ConnectionFailed")] {
                let result = try #require(results[device.token])
                #expect(result["status"] as? String == "failed")
                #expect(result["reason"] as? String == reason)
                #expect(result["apns_status"] is NSNull)
                #expect(result["attempts"] as? Int == 2)
            }
            #expect(testbed.production.pushCount(token: phone.token) == 0)
            herald.send(SIGTERM)
            #expect(try await herald.waitForExit(timeout: .seconds(30)) == 0)
        }
    }
}
