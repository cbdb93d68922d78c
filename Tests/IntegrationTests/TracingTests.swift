import KafkaMessages
import Foundation
import KafkaTransport
import Testing

/// `herald run` with tracing on (the standard OTEL_* variables) against a real OTLP/HTTP
/// endpoint the test runs: an event's `traceparent` continues into Herald's spans and onto its
/// results; a malformed one is ignored and the event delivered as usual.
@Suite(.timeLimit(.minutes(5)))
struct TracingTests {
    @Test func anEventsTraceparentContinuesIntoSpansAndResultsAndAMalformedOneIsIgnored() async throws {
        let receiver = try OTLPReceiver.start()
        defer { receiver.stop() }
        let devices = TestDevice.twoPerUser(["u-1", "u-2"])
        // A device APNs answers 410, so the traced event has a line about it in the log.
        let gone = TestDevice(user: "u-1", token: TestDevice.randomToken(), environment: "production")
        let testbed = try HeraldTestbed(unregisteredTokens: [gone.token: 1_795_255_300_123])
        let topics = testbed.topics
        let traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
        let parentSpanID = "00f067aa0ba902b7"
        try await testbed.withMocks {
            var environment = try await testbed.heraldEnvironment(group: "herald-\(UUID().uuidString)")
            environment["OTEL_EXPORTER_OTLP_ENDPOINT"] = "http://127.0.0.1:\(receiver.port)"
            environment["OTEL_EXPORTER_OTLP_PROTOCOL"] = "http/json"
            environment["OTEL_BSP_SCHEDULE_DELAY"] = "200"
            let herald = try await testbed.startHerald(environment)
            try await testbed.register(devices + [gone])
            try await testbed.waitForActiveTokens(users: ["u-1", "u-2"], count: devices.count + 1)

            func event(_ id: String, user: String, traceparent: String) -> KafkaOutgoingMessage {
                KafkaOutgoingMessage(
                    topic: topics.requests,
                    key: Array(id.utf8),
                    value: Array(#"{"id":"\#(id)","user_ids":["\#(user)"],"topic":"\#(testbed.bundleID)","payload":{"aps":{"alert":"hi"}}}"#.utf8),
                    headers: [KafkaHeader(key: "traceparent", text: traceparent)]
                )
            }
            try await testbed.producer.send(event("e-traced", user: "u-1", traceparent: "00-\(traceID)-\(parentSpanID)-01"))
            try await testbed.producer.send(event("e-malformed", user: "u-2", traceparent: "00-not-a-trace-context"))

            let reader = try TopicReader(topics: [topics.results])
            let records = try await reader.read(timeout: .seconds(120)) { $0.count >= devices.count + 1 }
            let results = records.compactMap { record in ResultRecord(record).map { ($0, record) } }
            #expect(results.count == devices.count + 1)
            #expect(results.allSatisfy { $0.0.status == ($0.0.token == gone.token ? "unregistered" : "delivered") }, "the malformed header changes nothing")
            for (result, record) in results where result.eventID == "e-traced" {
                let header = try #require(record.header("traceparent"), "a traced event's result carries a traceparent")
                #expect(header.split(separator: "-").dropFirst().first.map(String.init) == traceID)
            }

            // Spans reach the receiver within the exporter's batch delay.
            let clock = ContinuousClock()
            let deadline = clock.now + .seconds(30)
            while clock.now < deadline, receiver.spans.filter({ $0.name == "herald.send" }).count < devices.count + 1 {
                try await Task.sleep(for: .milliseconds(100))
            }
            let spans = receiver.spans
            let traced = try #require(spans.first { $0.name == "herald.event" && $0.attributes["herald.event_id"] == "e-traced" })
            #expect(traced.traceID == traceID)
            #expect(traced.parentSpanID == parentSpanID, "the event's span continues the message's context")
            let sends = spans.filter { $0.name == "herald.send" && $0.traceID == traceID }
            #expect(sends.count == 3, "one per device of u-1")
            #expect(sends.contains { $0.attributes["herald.status"] == "unregistered" && $0.attributes["apns.status"] == "410" })
            #expect(sends.allSatisfy { $0.parentSpanID == traced.spanID })
            #expect(sends.allSatisfy { $0.attributes["herald.event_id"] == "e-traced" && $0.attributes["herald.attempts"] != nil })
            #expect(sends.allSatisfy { ($0.attributes["herald.token"] ?? "").hasSuffix("…") }, "tokens redacted")
            let malformed = try #require(spans.first { $0.name == "herald.event" && $0.attributes["herald.event_id"] == "e-malformed" })
            #expect(malformed.traceID != traceID && malformed.parentSpanID.isEmpty, "a new trace")

            // The log line about the gone device names the event and its trace.
            let log = try String(contentsOfFile: testbed.directory.appendingPathComponent("herald.log").path, encoding: .utf8)
            let line = try #require(log.split(separator: "\n").first { $0.contains("notification not delivered") })
            #expect(line.contains("push.event_id=e-traced"), "\(line)")
            #expect(line.contains("trace_id=\(traceID)"), "\(line)")
            #expect(!line.contains(gone.token), "tokens shortened")

            herald.send(SIGTERM)
            #expect(try await herald.waitForExit(timeout: .seconds(30)) == 0)
        }
    }

    /// Tracing off (no OTEL_* endpoint): no span is made, but the results and the unregistered
    /// event still carry the event's `traceparent` (and `tracestate`), so they stay in the
    /// producer's trace; a malformed one is not passed on.
    @Test func withTracingOffResultsStillCarryTheEventsTraceContext() async throws {
        let phone = TestDevice(user: "u-1", token: TestDevice.randomToken(), environment: "production")
        let gone = TestDevice(user: "u-1", token: TestDevice.randomToken(), environment: "production")
        let other = TestDevice(user: "u-2", token: TestDevice.randomToken(), environment: "production")
        let testbed = try HeraldTestbed(unregisteredTokens: [gone.token: 1_795_255_300_123])
        let topics = testbed.topics
        let traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
        try await testbed.withMocks {
            let environment = try await testbed.heraldEnvironment(group: "herald-\(UUID().uuidString)")
            #expect(environment.keys.allSatisfy { !$0.hasPrefix("OTEL_") && $0 != "HERALD_OTEL_TRACES" }, "tracing off")
            let herald = try await testbed.startHerald(environment)
            try await testbed.register([phone, gone, other])
            try await testbed.waitForActiveTokens(users: ["u-1", "u-2"], count: 3)
            for (id, user, headers) in [
                ("e-traced", "u-1", [KafkaHeader(key: "traceparent", text: traceparent), KafkaHeader(key: "tracestate", text: "vendor=1")]),
                ("e-malformed", "u-2", [KafkaHeader(key: "traceparent", text: "00-not-a-trace-context")]),
            ] {
                try await testbed.producer.send(
                    KafkaOutgoingMessage(
                        topic: topics.requests,
                        key: Array(id.utf8),
                        value: Array(#"{"id":"\#(id)","user_ids":["\#(user)"],"topic":"\#(testbed.bundleID)","payload":{"aps":{"alert":"hi"}}}"#.utf8),
                        headers: headers
                    )
                )
            }
            let reader = try TopicReader(topics: [topics.results, topics.unregistered])
            let records = try await reader.read(timeout: .seconds(120)) { records in
                records.filter { $0.topic == topics.results }.count >= 3 && records.contains { $0.topic == topics.unregistered }
            }
            let traced = records.filter { $0.topic == topics.unregistered || ResultRecord($0)?.eventID == "e-traced" }
            #expect(traced.count == 3, "two results and the unregistered event")
            for record in traced {
                #expect(record.header("traceparent") == traceparent, "\(record.topic)")
                #expect(record.header("tracestate") == "vendor=1", "\(record.topic)")
            }
            let malformed = try #require(records.first { ResultRecord($0)?.eventID == "e-malformed" })
            #expect(malformed.header("traceparent") == nil)
            #expect(ResultRecord(malformed)?.status == "delivered")
            herald.send(SIGTERM)
            #expect(try await herald.waitForExit(timeout: .seconds(30)) == 0)
        }
    }
}
