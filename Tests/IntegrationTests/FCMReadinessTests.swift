import Foundation
import MockFCM
import Testing
import _CryptoExtras

/// The real `herald` configured for FCM only through HERALD_FCM_*: it exchanges an access token
/// at the mock FCM's token endpoint and becomes ready, and a key the endpoint refuses makes it
/// report `fcm_token_unavailable`.
@Suite(.timeLimit(.minutes(5)))
struct FCMReadinessTests {
    @Test func heraldIsReadyWithAnFCMTokenAndReportsWhenTheTokenEndpointRefusesTheKey() async throws {
        let testbed = try HeraldTestbed()
        try await testbed.withMocks {
            // The testbed's key: the mock issues a token, Herald is ready and counts the exchange.
            var (environment, httpPort) = try await testbed.heraldEnvironmentServingHTTP(group: "herald-\(UUID().uuidString)")
            var herald = try await testbed.startHerald(environment)
            let ready = try await ReadinessTests.waitForReadiness(port: httpPort) { status, _ in status == 200 }
            #expect(ready.status == 200, "\(ready.body)")
            #expect(testbed.fcm.tokenExchangeCount >= 1)
            let metrics = try PrometheusText(try #require(httpGet(port: httpPort, path: "/metrics")?.body))
            #expect(metrics.sum("herald_fcm_token_exchanges_total", where: ["project": testbed.fcmProjectID, "result": "ok"]) >= 1)
            herald.send(SIGTERM)
            #expect(try await herald.waitForExit(timeout: .seconds(30)) == 0)

            // A key the mock does not trust: the exchange is refused, Herald says why it is not ready.
            let untrusted = try _RSA.Signing.PrivateKey(keySize: .bits2048)
            environment["HERALD_FCM_SERVICE_ACCOUNT_PATH"] = try await testbed.writeFCMServiceAccount(named: "untrusted.json", key: untrusted)
            httpPort = try freePort()
            environment["HERALD_HTTP_PORT"] = String(httpPort)
            herald = try await testbed.startHerald(environment)
            // Kafka and PostgreSQL are fine once the consumer joins: FCM is then the one condition left.
            let refused = try await ReadinessTests.waitForReadiness(port: httpPort) { _, body in body == "not ready: fcm_token_unavailable\n" }
            #expect(refused.status == 503)
            #expect(refused.body == "not ready: fcm_token_unavailable\n")
            #expect(testbed.fcm.refusedAssertionCount >= 1)
            let failing = try PrometheusText(try #require(httpGet(port: httpPort, path: "/metrics")?.body))
            #expect(failing.sum("herald_fcm_token_refresh_failures_total", where: ["project": testbed.fcmProjectID]) >= 1)
            #expect(failing.value("herald_ready") == 0)
            herald.send(SIGTERM)
            #expect(try await herald.waitForExit(timeout: .seconds(30)) == 0)
        }
    }
}
