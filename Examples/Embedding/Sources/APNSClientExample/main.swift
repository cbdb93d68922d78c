// Herald's APNs client in an app's ServiceGroup, sending one notification to the mock APNs.
import APNSCore
import APNSHTTP2
import Crypto
import Foundation
import Logging
import MockAPNS
import ServiceLifecycle

let logger = Logger(label: "apns-client-example")
let caPath = FileManager.default.temporaryDirectory.appendingPathComponent("example-mock-ca-\(UUID().uuidString).pem").path
defer { try? FileManager.default.removeItem(atPath: caPath) }

// Your .p8 key from Apple's developer account: ProviderTokenCredentials(keyID:teamID:p8PEM:).
let key = P256.Signing.PrivateKey()
let credentials = ProviderTokenCredentials(keyID: "ABC123DEFG", teamID: "TEAM123456", privateKey: key)

// A mock APNs that trusts the key, on a free port with its own CA.
let mock = MockAPNSServer(
    configuration: MockAPNSConfiguration(caCertificatePath: caPath, providerKeys: [credentials.keyID: key.publicKey], teamID: credentials.teamID),
    logger: logger
)

try await withThrowingDiscardingTaskGroup { group in
    group.addTask { try await mock.run() }
    let endpoint = APNSClientConfiguration.Endpoint(host: "127.0.0.1", port: try await mock.listeningPort())

    // The client: Apple's endpoints by default; here the mock's, trusting its CA.
    let client = try APNSHTTP2Client(
        configuration: APNSClientConfiguration(
            authentication: .token(credentials),
            production: endpoint,
            sandbox: endpoint,
            additionalTrustRootsPEMPath: caPath
        ),
        logger: logger
    )
    // The client is a Service: run it in the app's ServiceGroup beside the app's own services.
    let services = ServiceGroup(services: [client], logger: logger)
    group.addTask { try await services.run() }

    let request = APNSRequest(
        deviceToken: String(repeating: "ab", count: 32),
        topic: "com.example.app",
        pushType: .alert,
        priority: APNSPushType.alert.defaultPriority,
        apnsID: UUID().uuidString.lowercased(),
        payload: Array(#"{"aps":{"alert":"Hello from the APNs client"}}"#.utf8)
    )
    let response = try await client.send(request, environment: .production, deadline: .now + .seconds(10))
    print("APNs answered \(response.status) for \(request.apnsID)")

    guard response.status == 200, mock.receivedRequests().count == 1 else {
        print("unexpected: status \(response.status), the mock received \(mock.receivedRequests().count) requests")
        exit(1)
    }
    await services.triggerGracefulShutdown()
    group.cancelAll()
}
