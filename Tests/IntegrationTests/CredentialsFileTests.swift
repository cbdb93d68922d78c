import PostgresStores
import KafkaMessages
import Crypto
import PushStores
import Foundation
import HeraldService
import KafkaTransport
import MockAPNS
import MockServerSupport
import SwiftASN1
import Testing
import X509

/// `herald run` configured with HERALD_CREDENTIALS_FILE only (no HERALD_APNS_KEY_*): each
/// listed app is pushed with its own credential (two token keys and a client certificate), and
/// an event for an app the file does not list gets `rejected` results with reason
/// `NoCredentialForTopic`, nothing sent.
@Suite(.timeLimit(.minutes(5)))
struct CredentialsFileTests {
    @Test func eachAppIsPushedWithItsOwnCredentialAndAnUnlistedAppIsRejected() async throws {
        // A provider's client certificate, issued by a CA the mocks trust beside the token keys.
        let authority = try CertificateAuthority(commonName: "Test Provider CA")
        let authorityPath = FileManager.default.temporaryDirectory.appendingPathComponent("provider-ca-\(UUID().uuidString).pem").path
        try authority.pem.write(toFile: authorityPath, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(atPath: authorityPath) }
        let testbed = try HeraldTestbed(otherKeyIDs: ["KEY7654321"], clientCertificateAuthority: authorityPath)
        let shop = testbed.bundleID
        let news = testbed.bundleID + ".news"
        let legacy = testbed.bundleID + ".legacy"
        let unlisted = testbed.bundleID + ".unlisted"
        let otherKey = try #require(testbed.otherKeys.first)
        let (certificate, certificateKey) = try authority.issue(commonName: "Apple Push Services: \(legacy)", usage: .clientAuth)
        let certificatePath = testbed.directory.appendingPathComponent("legacy.pem").path
        let certificateKeyPath = testbed.directory.appendingPathComponent("legacy-key.pem").path
        try certificate.serializeAsPEM().pemString.write(toFile: certificatePath, atomically: true, encoding: .utf8)
        try certificateKey.pemRepresentation.write(toFile: certificateKeyPath, atomically: true, encoding: .utf8)
        let devices = [shop, news, legacy, unlisted].map { ($0, TestDevice(user: "u-1", token: TestDevice.randomToken(), environment: "production")) }
        let file = testbed.directory.appendingPathComponent("credentials.json")
        try Data(
            """
            [ { "topics": ["\(shop)"], "key_path": "\(URL(fileURLWithPath: testbed.key.path).lastPathComponent)",
                "key_id": "\(testbed.key.keyID)", "team_id": "\(testbed.key.teamID)" },
              { "topics": ["\(news)"], "key_path": "\(otherKey.path)", "key_id": "\(otherKey.keyID)", "team_id": "\(otherKey.teamID)" },
              { "topics": ["\(legacy)"], "cert_path": "legacy.pem", "cert_key_path": "legacy-key.pem" } ]
            """.utf8
        ).write(to: file)
        let topics = testbed.topics
        try await testbed.withMocks {
            var (environment, httpPort) = try await testbed.heraldEnvironmentServingHTTP(group: "herald-\(UUID().uuidString)")
            for key in ["HERALD_APNS_KEY_PATH", "HERALD_APNS_KEY_ID", "HERALD_APNS_TEAM_ID"] { environment[key] = nil }
            environment["HERALD_CREDENTIALS_FILE"] = file.path
            let herald = try await testbed.startHerald(environment)
            for (app, device) in devices {
                try await testbed.producer.send(
                    KafkaOutgoingMessage(
                        topic: topics.tokens,
                        key: Array(device.token.utf8),
                        value: Array(
                            #"{"action":"register","user_id":"u-1","token":"\#(device.token)","topic":"\#(app)","timestamp":"2026-11-21T10:00:00Z"}"#.utf8)
                    )
                )
            }
            // Nothing orders push.tokens before push.requests: wait until PostgreSQL has every device.
            try await HeraldApplication.withTokenStore(postgresURL: try PostgresURL(TestEnvironment.postgresURL), logger: testbed.logger) { store in
                let deadline = ContinuousClock.now + .seconds(60)
                for (app, _) in devices {
                    while try await store.activeTokens(topic: app, userIDs: ["u-1"], environment: nil).isEmpty {
                        guard ContinuousClock.now < deadline else { throw TestFailure("\(app)'s device was not registered in 60 s") }
                        try await Task.sleep(for: .milliseconds(200))
                    }
                }
            }
            for (app, _) in devices {
                try await testbed.producer.send(
                    KafkaOutgoingMessage(
                        topic: topics.requests,
                        key: Array(app.utf8),
                        value: Array(#"{"id":"e-\#(app)","user_ids":["u-1"],"topic":"\#(app)","payload":{"aps":{"alert":"hi"}}}"#.utf8)
                    )
                )
            }
            let reader = try TopicReader(topics: [topics.results])
            let records = try await reader.read(timeout: .seconds(120)) { $0.count >= devices.count }
            let results = Dictionary(
                uniqueKeysWithValues: records.compactMap { record in
                    record.json.flatMap { json in (json["event_id"] as? String).map { ($0, json) } }
                })
            #expect(results["e-\(shop)"]?["status"] as? String == "delivered")
            #expect(results["e-\(news)"]?["status"] as? String == "delivered")
            #expect(results["e-\(legacy)"]?["status"] as? String == "delivered")
            let rejected = try #require(results["e-\(unlisted)"])
            #expect(rejected["status"] as? String == "rejected")
            #expect(rejected["reason"] as? String == "NoCredentialForTopic")
            #expect(rejected["apns_status"] is NSNull)
            #expect(rejected["attempts"] as? Int == 0)

            // Each app's request was signed with its own key.
            let requests = testbed.production.receivedRequests()
            func keyID(_ token: String) -> String? { requests.first { $0.token == token }?.providerKeyID }
            #expect(keyID(devices[0].1.token) == testbed.key.keyID)
            #expect(keyID(devices[1].1.token) == otherKey.keyID)
            let legacyRequest = try #require(requests.first { $0.token == devices[2].1.token })
            #expect(legacyRequest.header("authorization") == nil, "the certificate app's connection authenticates with its certificate")
            #expect(requests.allSatisfy { $0.token != devices[3].1.token }, "nothing sent for the unlisted app")

            // Apple serves broadcast channels to token authentication only: the certificate app's
            // channel event and channel command are refused unsent, with the reason.
            let channelEvent = "e-\(legacy)-channel"
            try await testbed.producer.send(
                KafkaOutgoingMessage(
                    topic: topics.requests,
                    key: Array(channelEvent.utf8),
                    value: Array(
                        #"{"id":"\#(channelEvent)","channel_id":"AAAAAAAAAAAAAAAAAAAAAA==","topic":"\#(legacy)","payload":{"aps":{}}}"#.utf8
                    )
                )
            )
            try await testbed.producer.send(
                KafkaOutgoingMessage(
                    topic: topics.channels,
                    key: Array(legacy.utf8),
                    value: Array(#"{"request_id":"\#(channelEvent)","action":"create","topic":"\#(legacy)"}"#.utf8)
                )
            )
            let channelRecords = try await TopicReader(topics: [topics.results, topics.channelResults]).read(timeout: .seconds(60)) {
                $0.filter { $0.json?["event_id"] as? String == channelEvent || $0.json?["request_id"] as? String == channelEvent }.count >= 2
            }
            let channelResult = try #require(channelRecords.compactMap(\.json).first { $0["event_id"] as? String == channelEvent })
            #expect(channelResult["status"] as? String == "rejected")
            #expect(channelResult["reason"] as? String == "TokenAuthenticationRequired")
            #expect(channelResult["apns_request_id"] is NSNull, "nothing was sent")
            let answer = try #require(channelRecords.compactMap(\.json).first { $0["request_id"] as? String == channelEvent })
            #expect(answer["status"] as? String == "rejected")
            #expect(answer["reason"] as? String == "TokenAuthenticationRequired")
            #expect(testbed.production.receivedRequests().allSatisfy { $0.token != "" }, "no channel request reached APNs")

            // The client certificate's expiry is exported, for the alert 14 days ahead.
            let metrics = try #require(httpGet(port: httpPort, path: "/metrics"))
            let expiry = try PrometheusText(metrics.body).value("herald_tls_certificate_expiry_timestamp_seconds", ["kind": "apns_client"])
            #expect(expiry == certificate.notValidAfter.timeIntervalSince1970.rounded(.down))

            herald.send(SIGTERM)
            #expect(try await herald.waitForExit(timeout: .seconds(30)) == 0)
        }
    }
}
