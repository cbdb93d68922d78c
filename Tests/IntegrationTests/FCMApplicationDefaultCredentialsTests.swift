import APNSCore
import Foundation
import MockFCM
import Testing

/// FCM credentials without HERALD_FCM_SERVICE_ACCOUNT_PATH, against the real `herald` and the mock
/// FCM: a key file that GOOGLE_APPLICATION_CREDENTIALS names, and, with HERALD_FCM_PROJECT_ID
/// alone, the metadata server's access tokens (GKE Workload Identity), which the mock serves too.
@Suite(.timeLimit(.minutes(3)))
struct FCMApplicationDefaultCredentialsTests {
    @Test(arguments: [false, true])
    func androidDevicesAreReachedWithoutAKeyFileSetting(metadataServer: Bool) async throws {
        let testbed = try HeraldTestbed(fcmMetadataServer: metadataServer)
        let user = "adc-\(UUID().uuidString.prefix(8))"
        let pixel = AndroidDeliveryIntegrationTests.pixel(user)
        try await testbed.withMocks {
            var environment = try await testbed.heraldEnvironment(group: "herald-\(UUID().uuidString)")
            let keyFile = environment.removeValue(forKey: "HERALD_FCM_SERVICE_ACCOUNT_PATH")
            if metadataServer {
                environment["HERALD_FCM_PROJECT_ID"] = testbed.fcmProjectID
                environment["HERALD_FCM_METADATA_URL"] = "https://127.0.0.1:\(try await testbed.fcm.listeningPort())"
            } else {
                environment["GOOGLE_APPLICATION_CREDENTIALS"] = keyFile
            }
            let herald = try await testbed.startHerald(environment)
            try await testbed.registerAndroid(user: user, token: pixel, at: "2026-11-28T10:00:00Z")
            try await testbed.waitForActiveDevices(users: [user], count: 1)
            try await testbed.publishMixedEvent(id: "adc-1", users: [user])
            let reader = try TopicReader(topics: [testbed.topics.results])
            let records = try await reader.read(timeout: .seconds(60)) { !$0.isEmpty }
            let result = try #require(records.first?.json)
            #expect(result["status"] as? String == "delivered", "\(result)")
            #expect(testbed.fcm.deliveredCount(token: pixel) == 1)
            if metadataServer {
                #expect(testbed.fcm.metadataTokensIssued >= 1 && testbed.fcm.tokenExchangeCount == 0, "tokens from the metadata server")
            } else {
                #expect(testbed.fcm.tokenExchangeCount >= 1 && testbed.fcm.metadataTokensIssued == 0, "tokens from the key file's assertion")
            }
            herald.send(SIGTERM)
            #expect(try await herald.waitForExit(timeout: .seconds(30)) == 0)
        }
    }
}
