import _CryptoExtras
import FCMCore
import PushCore
import FCMHTTP
import Foundation
import Logging
import MockFCM
import Prometheus
import Testing

/// A mock FCM and an ``FCMHTTPClient`` pointed at it over real TLS and HTTP/2.
struct FCMHarness: Sendable {
    var server: MockFCMServer
    var client: FCMHTTPClient
    var account: FCMServiceAccount
    var caPath: String
    var port: Int

    static let logger = Logger(label: "fcm-harness", factory: { _ in SwiftLogNoOpLogHandler() })
    static let projectID = "demo-project"
    static let clientEmail = "herald@demo-project.iam.gserviceaccount.com"
    /// One RSA key for the suite: generating one takes a while.
    static let key = try! _RSA.Signing.PrivateKey(keySize: .bits2048)
    /// The mock's latency in the deadline tests (whose requests have 200 ms), and the bound
    /// within which such a request must have ended: far apart, so that a loaded machine's
    /// lateness cannot blur a reset at the deadline with an answer after the latency.
    static let (slowAnswer, endedAtTheDeadlineWithin): (Duration, Duration) = (.milliseconds(1500), .milliseconds(1000))

    /// Starts a mock trusting `key` (with `configure` applied), a client with `signingKey` (the
    /// trusted key by default) and `configureClient` applied, runs `body`, then stops both.
    static func run(
        signingKey: _RSA.Signing.PrivateKey = key,
        configure: @Sendable (inout MockFCMConfiguration) -> Void = { _ in },
        configureClient: @Sendable (inout FCMClientConfiguration) -> Void = { _ in },
        metrics: PrometheusCollectorRegistry = PrometheusCollectorRegistry(),
        tokenClock: any TokenSourceClock = ContinuousTokenSourceClock(),
        _ body: @Sendable (FCMHarness) async throws -> Void
    ) async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("fcm-tests-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let caPath = directory.appendingPathComponent("mock-fcm-ca.pem").path
        var mock = MockFCMConfiguration(
            caCertificatePath: caPath,
            serviceAccounts: [MockFCMServiceAccount(projectID: projectID, clientEmail: clientEmail, publicKey: key.publicKey)]
        )
        configure(&mock)
        let server = MockFCMServer(configuration: mock, logger: logger)
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await server.run() }
            do {
                let port = try await server.listeningPort()
                let account = FCMServiceAccount(
                    projectID: projectID,
                    privateKeyID: "key-1",
                    privateKeyPEM: signingKey.pkcs8PEMRepresentation,
                    clientEmail: clientEmail,
                    tokenURI: "https://127.0.0.1:\(port)/token"
                )
                var configuration = FCMClientConfiguration(
                    baseURL: "https://127.0.0.1:\(port)",
                    credentials: FCMCredentials(fallback: account),
                    additionalTrustRootsPEMPath: caPath
                )
                configureClient(&configuration)
                let client = try FCMHTTPClient(
                    configuration: configuration, metricsFactory: PrometheusMetricsFactory(registry: metrics), tokenClock: tokenClock, logger: logger)
                group.addTask { try await client.run() }
                try await body(FCMHarness(server: server, client: client, account: account, caPath: caPath, port: port))
            } catch {
                group.cancelAll()
                throw error
            }
            group.cancelAll()
            try await group.waitForAll()
        }
    }

    /// A notification to `token` for the package, with Herald's mapping applied.
    static func request(_ token: String, message: String = #"{"notification":{"title":"Shipped"},"data":{"order":"42"}}"#)
        throws -> FCMRequest
    {
        let json = #"{"package":"com.example.shop","message":\#(message)}"#
        let part = try FCMEventPart(json: Array(json.utf8), priority: 10, expiration: nil, collapseID: "order-42", nowMilliseconds: 0)
        return part.request(to: .token(token))
    }

    /// Sends `request` with a deadline `timeout` from now.
    func send(_ request: FCMRequest, timeout: Duration = .seconds(10)) async throws -> FCMResponse {
        try await client.send(request, deadline: .now + timeout)
    }

    /// Sends as the pipeline would: retries what ``FCMDecision`` says to retry (after at least
    /// its `notBefore`, else 20 ms) and transport errors, up to `attempts`, each with a deadline
    /// `timeout` from its start (one past it may have been delivered: its retry can repeat it);
    /// returns the last answer.
    func deliver(_ request: FCMRequest, attempts: Int = 10, timeout: Duration = .seconds(10)) async throws -> (response: FCMResponse, attempts: Int) {
        var attempt = 0
        while true {
            attempt += 1
            do {
                let response = try await send(request, timeout: timeout)
                guard case .retry(let retry) = response.decision, attempt < attempts else { return (response, attempt) }
                try await Task.sleep(for: retry.notBefore ?? .milliseconds(20))
            } catch let error as TransportError where attempt < attempts {
                _ = error
                try await Task.sleep(for: .milliseconds(20))
            }
        }
    }
}
