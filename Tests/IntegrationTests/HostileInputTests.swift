import KafkaMessages
import Foundation
import HeraldService
import KafkaTransport
import MockAPNS
import Testing

/// Hostile input on real parts: every bad message lands in push.dlq with a stable code, every
/// valid one is still delivered, and Herald stays ready.
@Suite(.timeLimit(.minutes(5)))
struct HostileInputTests {
    /// Values that must never crash Herald or stall a partition, with the code each must get.
    static func hostileRequests(bundleID: String) -> [([UInt8]?, String)] {
        let deep = String(repeating: "[", count: 50_000)
        let big = String(repeating: "x", count: 5000)
        var cases: [([UInt8]?, String)] = [
            (nil, "invalid_json"),
            ([], "invalid_json"),
            ([0xFF, 0xFE, 0x00, 0x7B], "invalid_json"),
            (Array("{\"id\":".utf8), "invalid_json"),
            (Array(deep.utf8), "invalid_json"),
            (Array("[\"not\",\"an\",\"object\"]".utf8), "invalid_json"),
            (Array("null".utf8), "invalid_json"),
            (Array(#"{"id":"x","user_ids":["u"],"topic":"\#(bundleID)","payload":{"aps":{"alert":"\#(big)"}}}"#.utf8), "payload_too_large"),
        ]
        let schemaViolations = [
            #"{"user_ids":["u"],"topic":"t","payload":{"aps":{}}}"#,
            #"{"id":"","user_ids":["u"],"topic":"t","payload":{"aps":{}}}"#,
            #"{"id":"\#(String(repeating: "i", count: 129))","user_ids":["u"],"topic":"t","payload":{"aps":{}}}"#,
            #"{"id":"x","user_ids":[],"topic":"t","payload":{"aps":{}}}"#,
            #"{"id":"x","user_ids":"u","topic":"t","payload":{"aps":{}}}"#,
            #"{"id":"x","user_ids":[""],"topic":"t","payload":{"aps":{}}}"#,
            #"{"id":"x","user_ids":["u"],"topic":"","payload":{"aps":{}}}"#,
            #"{"id":"x","user_ids":["u"],"topic":"t","push_type":"sms","payload":{"aps":{}}}"#,
            #"{"id":"x","user_ids":["u"],"topic":"t","priority":3,"payload":{"aps":{}}}"#,
            #"{"id":"x","user_ids":["u"],"topic":"t","priority":"10","payload":{"aps":{}}}"#,
            #"{"id":"x","user_ids":["u"],"topic":"t","expiration":1.5,"payload":{"aps":{}}}"#,
            #"{"id":"x","user_ids":["u"],"topic":"t","collapse_id":"\#(String(repeating: "c", count: 65))","payload":{"aps":{}}}"#,
            #"{"id":"x","user_ids":["u"],"topic":"t","payload":{"aps":"alert"}}"#,
            #"{"id":"x","user_ids":["u"],"topic":"t","payload":[]}"#,
            #"{"id":"x\u0000","user_ids":["u"],"topic":"t","payload":{"aps":{}}}"#,
        ]
        cases += schemaViolations.map { (Array($0.utf8), "schema_violation") }
        return cases
    }

    static func hostileTokenUpdates(bundleID: String) -> [([UInt8]?, String)] {
        [
            (Array(#"{"action":"register","user_id":"u","token":"zz11","topic":"\#(bundleID)","timestamp":"2026-11-21T10:00:00Z"}"#.utf8), "invalid_token"),
            (Array(#"{"action":"register","user_id":"u","token":"abc","topic":"\#(bundleID)","timestamp":"2026-11-21T10:00:00Z"}"#.utf8), "invalid_token"),
            (Array(#"{"action":"register","user_id":"u","token":"","topic":"\#(bundleID)","timestamp":"2026-11-21T10:00:00Z"}"#.utf8), "invalid_token"),
            (
                Array(
                    #"{"action":"register","user_id":"u","token":"\#(String(repeating: "ab", count: 250_000))","topic":"\#(bundleID)","timestamp":"2026-11-21T10:00:00Z"}"#
                        .utf8), "invalid_token"
            ),
            (Array(#"{"action":"register","user_id":"u","token":42,"topic":"\#(bundleID)","timestamp":"2026-11-21T10:00:00Z"}"#.utf8), "schema_violation"),
            (
                Array(
                    #"{"action":"register","token":"\#(String(repeating: "ab", count: 32))","topic":"\#(bundleID)","timestamp":"2026-11-21T10:00:00Z"}"#.utf8),
                "schema_violation"
            ),
            (
                Array(
                    #"{"action":"delete","user_id":"u","token":"\#(String(repeating: "ab", count: 32))","topic":"t","timestamp":"2026-11-21T10:00:00Z"}"#.utf8),
                "schema_violation"
            ),
            (
                Array(#"{"action":"register","user_id":"u","token":"\#(String(repeating: "ab", count: 32))","topic":"t","timestamp":"yesterday"}"#.utf8),
                "schema_violation"
            ),
            (Array("garbage".utf8), "invalid_json"),
        ]
    }

    @Test func hostileMessagesAreDeadLetteredAndValidOnesStillDelivered() async throws {
        let testbed = try HeraldTestbed()
        let topics = testbed.topics
        try await testbed.withMocks {
            let (environment, httpPort) = try await testbed.heraldEnvironmentServingHTTP(group: "herald-\(UUID().uuidString)")
            let herald = try await testbed.startHerald(environment)
            let users = ["u-1", "u-2"]
            let devices = TestDevice.twoPerUser(users)
            try await testbed.register(devices)
            try await testbed.waitForActiveTokens(users: users, count: devices.count)

            let cases =
                Self.hostileRequests(bundleID: testbed.bundleID).map { (topics.requests, $0.0, $0.1) }
                + Self.hostileTokenUpdates(bundleID: testbed.bundleID).map { (topics.tokens, $0.0, $0.1) }
            var expectedCodes: [String: Int] = [:]
            var hostile = 0
            var valid = 0
            // Interleave: one valid event after every few hostile messages, 300+ hostile in all.
            for _ in 0..<12 {
                for (topic, value, code) in cases {
                    try await testbed.producer.send(
                        KafkaOutgoingMessage(
                            topic: topic, key: Array("k\(hostile)".utf8), value: value,
                            headers: [KafkaHeader(key: "case", text: "\(hostile)")])
                    )
                    expectedCodes[code, default: 0] += 1
                    hostile += 1
                    if hostile % 4 == 0 {
                        try await testbed.publishEvent(id: "\(testbed.bundleID)-valid-\(valid)", users: users)
                        valid += 1
                    }
                }
            }
            #expect(hostile >= 300)

            let reader = try TopicReader(topics: [topics.results, topics.deadLetters])
            let records = try await reader.read(timeout: .seconds(180)) { records in
                records.filter { $0.topic == topics.results }.count >= valid * devices.count
                    && records.filter { $0.topic == topics.deadLetters }.count >= hostile
            }
            let deadLetters = records.filter { $0.topic == topics.deadLetters }
            let results = records.filter { $0.topic == topics.results }.compactMap(ResultRecord.init)

            #expect(Set(results.map(\.key)).count == valid * devices.count)
            #expect(results.allSatisfy { $0.status == "delivered" })
            #expect(deadLetters.count == hostile)
            var codes: [String: Int] = [:]
            for deadLetter in deadLetters {
                codes[deadLetter.header("herald-error") ?? "missing", default: 0] += 1
                #expect(deadLetter.header("herald-source-offset").flatMap(Int.init) != nil)
                #expect(deadLetter.header("case") != nil, "original headers kept")
            }
            #expect(codes == expectedCodes)
            #expect(httpStatus(port: httpPort, path: "/health/ready") == 200)
            #expect(herald.isRunning)
            herald.send(SIGTERM)
            #expect(try await herald.waitForExit(timeout: .seconds(30)) == 0)
        }
    }
}
