import Prometheus
@testable import PushPipeline
import Testing

/// The APNs answer counters keep their labels bounded whatever APNs sends.
@Suite struct SenderMetricsTests {
    @Test func unknownReasonsAndStatusesShareOneLabelEach() {
        let registry = PrometheusCollectorRegistry()
        let metrics = SenderMetrics(factory: PrometheusMetricsFactory(registry: registry))
        metrics.recordAttempt(status: 200, reason: nil, duration: .milliseconds(1))
        metrics.recordAttempt(status: 410, reason: "Unregistered", duration: .milliseconds(1))
        metrics.recordAttempt(status: 400, reason: "ReasonAppleAddsNextYear", duration: .milliseconds(1))
        metrics.recordAttempt(status: 400, reason: "AnotherNewReason", duration: .milliseconds(1))
        metrics.recordAttempt(status: 418, reason: nil, duration: .milliseconds(1))
        metrics.recordAttempt(status: nil, reason: "Timeout", duration: .milliseconds(1))
        metrics.recordRetry(status: 429, transportCause: "TooManyRequests")
        metrics.recordRetry(status: nil, transportCause: "StreamReset")
        let text = registry.emitToString()
        #expect(text.contains(#"herald_apns_responses_total{status="200",reason="none"} 1"#))
        #expect(text.contains(#"herald_apns_responses_total{status="410",reason="Unregistered"} 1"#))
        #expect(text.contains(#"herald_apns_responses_total{status="400",reason="unknown"} 2"#))
        #expect(text.contains(#"herald_apns_responses_total{status="other",reason="none"} 1"#))
        #expect(text.contains(#"herald_apns_responses_total{status="none",reason="Timeout"} 1"#))
        #expect(text.contains(#"herald_apns_retries_total{cause="429"} 1"#))
        #expect(text.contains(#"herald_apns_retries_total{cause="StreamReset"} 1"#))
        #expect(!text.contains("ReasonAppleAddsNextYear"))
        #expect(!text.contains("418"))
    }
}
