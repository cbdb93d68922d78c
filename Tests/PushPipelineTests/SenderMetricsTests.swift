import FCMCore
import Prometheus
import PushPipelineTesting
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

/// Issue 49, finding 8: FCM's answers and retries are counted as APNs' are, with bounded labels,
/// from what the sender reads of each answer.
@Suite struct FCMSenderMetricsTests {
    @Test func fcmAnswersAndRetriesAreCountedByStatusAndReason() async throws {
        let registry = PrometheusCollectorRegistry()
        func error(_ status: Int, _ canonical: String, _ code: FCMErrorCode?) -> FCMResponse {
            FCMResponse(status: status, error: FCMErrorBody(code: status, status: canonical, errorCode: code))
        }
        let fcm = AndroidDeliveryTests.ScriptedFCMClient(answers: [
            "busy": error(503, "UNAVAILABLE", .unavailable),
            "gone": error(404, "NOT_FOUND", .unregistered),
            "odd": error(400, "INVALID_ARGUMENT", FCMErrorCode(rawValue: "CODE_GOOGLE_ADDS_LATER")),
        ])
        let sender = RetryingSender(
            client: ScriptedAPNSClient(), fcmClient: fcm, policy: RetryingSenderTests.fastPolicy,
            metrics: SenderMetrics(factory: PrometheusMetricsFactory(registry: registry)))
        for token in ["ok", "busy", "gone", "odd"] {
            _ = try await sender.deliver(try FCMBatchDeliveryTests.request(token), consumedAt: .now)
        }
        let text = registry.emitToString()
        #expect(text.contains(#"herald_fcm_responses_total{status="200",reason="none"} 1"#))
        #expect(text.contains(#"herald_fcm_responses_total{status="503",reason="UNAVAILABLE"} 5"#), "\(text)")
        #expect(text.contains(#"herald_fcm_retries_total{cause="UNAVAILABLE"} 4"#))
        #expect(text.contains(#"herald_fcm_responses_total{status="404",reason="UNREGISTERED"} 1"#))
        #expect(text.contains(#"herald_fcm_responses_total{status="400",reason="unknown"} 1"#))
        #expect(!text.contains("CODE_GOOGLE_ADDS_LATER"))
    }
}
