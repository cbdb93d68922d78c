import KafkaMessages
import Foundation
import KafkaTransport
import MockAPNS
import Testing
import Yams

/// `/metrics` of `herald run` after a run with 429s, a 410 and a dead letter, read with a strict
/// Prometheus text parser: every family docs/operations.md lists, with the values that match what the
/// mocks and the topics saw; and the Grafana dashboard and alert rules use only those families.
@Suite(.timeLimit(.minutes(5)))
struct MetricsTests {
    @Test func metricsMatchWhatHappenedAndTheDashboardAndAlertsUseOnlyExportedFamilies() async throws {
        let users = (1...5).map { "u-\($0)" }
        let devices = TestDevice.twoPerUser(users)
        let gone = TestDevice(user: "u-1", token: TestDevice.randomToken(), environment: "production")
        let testbed = try HeraldTestbed(
            unregisteredTokens: [gone.token: 1_795_255_300_123],
            faults: MockAPNSFaults(tooManyRequestsFraction: 0.3, seed: 7)
        )
        let topics = testbed.topics
        try await testbed.withMocks {
            var (environment, httpPort) = try await testbed.heraldEnvironmentServingHTTP(group: "herald-\(UUID().uuidString)")
            // A VAPID key, so the web push client's families are exported too (it connects only when asked).
            environment.merge(try BrowserWorld(directory: testbed.directory).vapidEnvironment) { _, browser in browser }
            let herald = try await testbed.startHerald(environment)
            try await testbed.register(devices + [gone])
            try await testbed.waitForActiveTokens(users: users, count: devices.count + 1)
            for (index, user) in users.enumerated() {
                try await testbed.publishEvent(id: "e-\(index)", users: [user])
            }
            try await testbed.producer.send(KafkaOutgoingMessage(topic: topics.requests, key: nil, value: Array("garbage".utf8)))

            let expectedResults = devices.count + 1
            let reader = try TopicReader(topics: [topics.results, topics.deadLetters])
            let records = try await reader.read(timeout: .seconds(120)) { records in
                records.filter { $0.topic == topics.results }.count >= expectedResults && records.contains { $0.topic == topics.deadLetters }
            }
            let results = records.filter { $0.topic == topics.results }.compactMap(ResultRecord.init)
            #expect(results.count == expectedResults)

            // Published results may still be counted a moment after the broker acknowledged them.
            var metrics = try PrometheusText(try #require(httpGet(port: httpPort, path: "/metrics")?.body))
            /// Offsets committed for push.requests, summed over its partitions (each the next offset to read).
            func committedRequests(_ metrics: PrometheusText) -> Double {
                metrics.samples.filter { $0.name == "herald_committed_offset" && $0.labels["topic"] == topics.requests }.map(\.value).reduce(0, +)
            }
            let requestMessages = Double(users.count + 1)
            for _ in 0..<50
            where metrics.sum("herald_results_total") < Double(expectedResults) || committedRequests(metrics) < requestMessages {
                try await Task.sleep(for: .milliseconds(100))
                metrics = try PrometheusText(try #require(httpGet(port: httpPort, path: "/metrics")?.body))
            }
            let production = testbed.production.statusCounts()
            let sandbox = testbed.sandbox.statusCounts()
            let tooMany = production[429] ?? 0
            #expect(tooMany > 0, "the mock answered some requests 429")

            #expect(metrics.value("herald_results_total", ["status": "delivered", "lane": "urgent", "platform": "apns"]) == Double(devices.count))
            #expect(metrics.value("herald_results_total", ["status": "unregistered", "lane": "urgent", "platform": "apns"]) == 1)
            #expect(metrics.value("herald_unregistered_published_total") == 1)
            #expect(metrics.value("herald_dead_letters_total", ["code": "invalid_json"]) == 1)
            #expect(metrics.value("herald_apns_responses_total", ["status": "410", "reason": "Unregistered"]) == 1)
            #expect(metrics.value("herald_apns_responses_total", ["status": "429", "reason": "TooManyRequests"]) == Double(tooMany))
            #expect(metrics.value("herald_apns_responses_total", ["status": "200", "reason": "none"]) == Double((production[200] ?? 0) + (sandbox[200] ?? 0)))
            #expect(metrics.value("herald_apns_retries_total", ["cause": "429"]) == Double(tooMany))
            let requests = production.values.reduce(0, +) + sandbox.values.reduce(0, +)
            #expect(metrics.value("herald_apns_request_duration_seconds_count") == Double(requests), "one per APNs request")
            let urgent = ["lane": "urgent"]
            #expect(metrics.value("herald_notification_duration_seconds_count", urgent) == Double(expectedResults), "one per result")
            #expect(metrics.value("herald_notification_ready_duration_seconds_count", urgent) == Double(expectedResults), "one per result")
            #expect((metrics.value("herald_notification_duration_seconds_count", ["lane": "bulk"]) ?? 0) == 0, "nothing on the bulk topic")
            let ready = try #require(metrics.value("herald_notification_ready_duration_seconds_sum", urgent))
            let published = try #require(metrics.value("herald_notification_duration_seconds_sum", urgent))
            #expect(ready > 0 && ready < published, "each result is handed to the producer before the broker acknowledges it")
            for stage in ["poll", "token_lookup", "ledger_lookup", "ledger_write", "result_publish", "offset_commit"] {
                #expect((metrics.value("herald_stage_duration_seconds_count", ["stage": stage]) ?? 0) >= 1, "\(stage)")
            }
            #expect(metrics.value("herald_messages_consumed_total", ["lane": "urgent"]) ?? 0 >= Double(users.count + 1 + devices.count + 1))
            #expect(metrics.value("herald_messages_consumed_total", ["lane": "bulk"]) == 0, "nothing on the bulk topic")
            #expect(metrics.value("herald_results_total", ["status": "delivered", "lane": "bulk", "platform": "apns"]) == 0)
            #expect(metrics.value("herald_ready") == 1)
            #expect(metrics.value("herald_build_info", ["revision": "unknown"]) == 1, "no HERALD_BUILD_REVISION outside the image")
            #expect(metrics.value("herald_assigned_partitions", ["lane": "urgent"]) ?? 0 >= 1)
            for gauge in [
                "herald_in_flight_messages", "herald_in_flight_sends", "herald_ledger_unrecorded_outcomes", "herald_paused_partitions",
                "herald_kafka_producer_queue", "herald_postgres_operations_in_flight", "herald_apns_streams_in_use",
            ] {
                #expect(metrics.types[gauge] == "gauge", "\(gauge)")
            }
            // APNs connections: both endpoints were used (devices in each environment), each over token auth.
            #expect(metrics.sum("herald_apns_connections") >= 2)
            #expect(metrics.value("herald_apns_provider_tokens_total") ?? 0 >= 2, "one token per connection at least")
            #expect(metrics.sum("herald_apns_goaways_total") == 0)
            #expect(metrics.sum("herald_apns_connection_failures_total") == 0)
            #expect(metrics.value("herald_postgres_errors_total") == 0)
            // Per partition this member holds: the committed offset and the lag behind the last fetch.
            #expect(committedRequests(metrics) == requestMessages, "every push.requests message committed")
            // Everything on push.requests is committed, so each of its partitions shows a lag of 0.
            let requestLags = metrics.samples.filter { $0.name == "herald_consumer_lag" && $0.labels["topic"] == topics.requests }
            let requestOffsets = metrics.samples.filter { $0.name == "herald_committed_offset" && $0.labels["topic"] == topics.requests }
            #expect(!requestLags.isEmpty && requestLags.count == requestOffsets.count, "one lag per partition held")
            #expect(requestLags.map(\.value).reduce(0, +) == 0)
            #expect(metrics.types["herald_consumer_lag"] == "gauge")

            // The dashboard and the alert rules query only families Herald exports.
            let deploy = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("../../deploy")
            let dashboard = try JSONSerialization.jsonObject(with: Data(contentsOf: deploy.appendingPathComponent("grafana/herald.json"))) as? [String: Any]
            let panels = try #require(dashboard?["panels"] as? [[String: Any]])
            let panelExpressions = panels.flatMap { ($0["targets"] as? [[String: Any]] ?? []).compactMap { $0["expr"] as? String } }
            let rules = try Yams.load(yaml: String(contentsOf: deploy.appendingPathComponent("prometheus/alerts.yaml"), encoding: .utf8)) as? [String: Any]
            let groups = try #require(rules?["groups"] as? [[String: Any]])
            let alertExpressions = groups.flatMap { ($0["rules"] as? [[String: Any]] ?? []).compactMap { $0["expr"] as? String } }
            #expect(panelExpressions.count >= 10)
            #expect(alertExpressions.count >= 6)
            let used = Set((panelExpressions + alertExpressions).flatMap(Self.metricNames))
            #expect(!used.isEmpty)
            #expect(used.subtracting(metrics.families).isEmpty, "not exported: \(used.subtracting(metrics.families).sorted())")

            herald.send(SIGTERM)
            #expect(try await herald.waitForExit(timeout: .seconds(30)) == 0)
        }
    }

    /// The `herald_…` metric families an expression reads (a histogram's `_bucket`, `_sum` and
    /// `_count` under the family).
    static func metricNames(in expression: String) -> [String] {
        expression.matches(of: /herald_[a-z_]+/).map { match in
            var name = String(match.output)
            for suffix in ["_bucket", "_sum", "_count"] where name.hasSuffix(suffix) {
                name = String(name.dropLast(suffix.count))
            }
            return name
        }
    }
}
