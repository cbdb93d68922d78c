import KafkaMessages
import Foundation
import HeraldService
import KafkaTransport
import MockAPNS
import Testing

/// End to end on real parts: Tansu (Kafka protocol), PostgreSQL, and two mock APNs servers
/// (production and sandbox) over HTTP/2 + TLS, with Herald built exactly as `herald run` builds it.
@Suite(.timeLimit(.minutes(5)))
struct WalkingSkeletonTests {
    @Test func deliversEveryEventToEveryDeviceOnceAndDeadLettersInvalidJSON() async throws {
        let testbed = try HeraldTestbed()
        let topics = testbed.topics
        try await testbed.withMocks {
            let configuration = try await testbed.heraldConfiguration(group: "herald-\(UUID().uuidString)")
            let users = ["u-1", "u-2", "u-3"]
            let devices = TestDevice.twoPerUser(users)
            // Uppercase with spaces, as an app might send it: Herald normalises it.
            let sent = devices.map { device in
                var sent = device
                sent.token = device.token.uppercased().enumerated()
                    .map { $0.offset % 8 == 7 ? "\($0.element) " : "\($0.element)" }.joined()
                return sent
            }
            try await testbed.register(sent)

            let herald = try HeraldApplication.makeServiceGroup(configuration: configuration, logger: testbed.logger)
            let eventCount = 50
            let expected = eventCount * devices.count
            let (results, deadLetters) = try await withRunningServices(herald) {
                // Registrations and events travel on different topics: let the registrations land first.
                try await testbed.waitForActiveTokens(users: users, count: devices.count)
                for index in 0..<eventCount {
                    if index == eventCount / 2 {
                        try await testbed.producer.send(
                            KafkaOutgoingMessage(
                                topic: topics.requests,
                                key: Array("bad".utf8),
                                value: Array("{not json".utf8),
                                headers: [KafkaHeader(key: "origin", text: "test")]
                            )
                        )
                    }
                    try await testbed.publishEvent(id: "\(testbed.bundleID)-event-\(index)", users: users + ["u-1"])
                }
                let reader = try TopicReader(topics: [topics.results, topics.deadLetters])
                let records = try await reader.read(timeout: .seconds(120)) { records in
                    records.filter { $0.topic == topics.results }.count >= expected
                        && records.contains { $0.topic == topics.deadLetters }
                }
                // Anything beyond the expected records would show up within a short grace period.
                let all = records + (try await reader.read(timeout: .seconds(2)) { _ in false })
                return (all.filter { $0.topic == topics.results }, all.filter { $0.topic == topics.deadLetters })
            }

            // Exactly one delivered result per (event, device).
            let outcomes = results.compactMap(\.json)
            #expect(outcomes.count == expected)
            #expect(outcomes.allSatisfy { $0["status"] as? String == "delivered" })
            #expect(Set(results.compactMap(ResultRecord.init).map(\.key)).count == expected)
            #expect(outcomes.allSatisfy { $0["topic"] as? String == testbed.bundleID && $0["attempts"] as? Int == 1 })

            // Exactly one push per (event, device), each at its environment's host.
            for device in devices {
                let counts = testbed.pushCounts(device)
                #expect(counts.right == eventCount && counts.wrong == 0)
            }
            #expect(testbed.production.repeatedAPNSIDCount == 0 && testbed.sandbox.repeatedAPNSIDCount == 0)
            let request = try #require(testbed.production.receivedRequests().first)
            #expect(request.header("apns-topic") == testbed.bundleID)
            #expect(request.header("apns-push-type") == "alert")
            #expect(request.header("apns-priority") == "10")
            #expect(request.header("apns-collapse-id")?.hasPrefix("c-\(testbed.bundleID)-event-") == true)

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
}
