import Foundation
import MockAPNS
import Testing

/// `herald run` on a broker it can reach over TLS only (scripts/services.sh: a second Tansu
/// behind a TLS listener with a private CA and a certificate for 127.0.0.1), configured only
/// through the documented keys: HERALD_KAFKA_SECURITY_PROTOCOL=SSL and
/// HERALD_KAFKA_SSL_CA_LOCATION. The testbed's own clients use the same settings.
@Suite(.timeLimit(.minutes(4)))
struct KafkaOverTLSTests {
    @Test func heraldDeliversThroughABrokerOverTLSAndNeverJoinsOneItCannotVerify() async throws {
        guard let broker = TestEnvironment.TLSBroker.offered else {
            print("KafkaOverTLSTests: skipped, the local services have no TLS broker (openssl missing?)")
            return
        }
        try await TestEnvironment.$tlsBroker.withValue(broker) {
            let phones = (1...3).map { TestDevice(user: "u-\($0)", token: TestDevice.randomToken(), environment: "production") }
            let users = phones.map(\.user)
            let testbed = try HeraldTestbed()
            try await testbed.withMocks {
                let (environment, httpPort) = try await testbed.heraldEnvironmentServingHTTP(group: "herald-\(UUID().uuidString)")
                #expect(environment["HERALD_KAFKA_SECURITY_PROTOCOL"] == "ssl")
                #expect(environment["HERALD_KAFKA_SSL_CA_LOCATION"] == broker.caPath)

                // Trusting only the system's roots, Herald cannot verify the broker: it never
                // joins its group and says so in readiness.
                var unverified = environment
                unverified["HERALD_KAFKA_SSL_CA_LOCATION"] = nil
                let refused = try await testbed.startHerald(unverified)
                let clock = ContinuousClock()
                let watchUntil = clock.now + .seconds(8)
                var readiness: (status: Int, body: String)?
                while clock.now < watchUntil {
                    readiness = httpGet(port: httpPort, path: "/health/ready") ?? readiness
                    try await Task.sleep(for: .milliseconds(250))
                }
                #expect(readiness?.status == 503)
                #expect(readiness?.body.contains("kafka_group_not_joined") == true, "\(String(describing: readiness))")
                refused.send(SIGTERM)
                #expect(try await refused.waitForExit(timeout: .seconds(30)) == 0)

                // With the broker's CA: registrations and events through the TLS broker, every
                // event delivered to every device once.
                let herald = try await testbed.startHerald(environment)
                try await testbed.register(phones)
                try await testbed.waitForActiveTokens(users: users, count: phones.count)
                for index in 1...4 { try await testbed.publishEvent(id: "e-tls-\(index)", users: users) }
                let reader = try TopicReader(topics: [testbed.topics.results])
                let records = try await reader.read(timeout: .seconds(120)) { $0.count >= 4 * phones.count }
                #expect(records.count == 4 * phones.count)
                #expect(records.allSatisfy { $0.json?["status"] as? String == "delivered" })
                #expect(phones.allSatisfy { testbed.production.pushCount(token: $0.token) == 4 })
                #expect(httpStatus(port: httpPort, path: "/health/ready") == 200)
                herald.send(SIGTERM)
                #expect(try await herald.waitForExit(timeout: .seconds(30)) == 0)
            }
        }
    }
}
