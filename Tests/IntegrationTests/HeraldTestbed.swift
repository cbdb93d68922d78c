import PostgresStores
import KafkaMessages
import Crypto
import PushStores
import Foundation
import HeraldService
import KafkaTransport
import Logging
import FCMCore
import MockAPNS
import MockServerSupport
import MockFCM
import ServiceLifecycle
import _CryptoExtras

/// One test's world on the real services: its own topics, bundle ID and provider key, two mock
/// APNs servers (production and sandbox), a mock FCM with a service account it trusts, and the
/// HERALD_* configuration pointing at them.
final class HeraldTestbed: Sendable {
    let topics: TestTopics
    let bundleID = "com.example.shop.\(UUID().uuidString.prefix(8).lowercased())"
    let key: TestProviderKey
    let production: MockAPNSServer
    let sandbox: MockAPNSServer
    /// The mock FCM (real HTTP/2 and TLS, its token endpoint included); it trusts ``fcmKey``.
    let fcm: MockFCMServer
    /// The Android package events name in `fcm.package`, and the Firebase project serving it.
    let fcmPackage = "com.example.shop.android.\(UUID().uuidString.prefix(8).lowercased())"
    let fcmProjectID = "herald-test"
    let directory: URL
    let logger: Logger
    let producer: KafkaProducer

    /// Provider keys besides `key` that the mocks accept (same team).
    let otherKeys: [TestProviderKey]

    /// `faults` are injected by the production mock only; `otherKeyIDs` name more provider keys
    /// the mocks accept.
    /// `clientCertificateAuthority`, when given, is a PEM CA whose client certificates the
    /// mocks also accept (connections without one authenticate with provider tokens).
    /// `sandboxUniqueIDs` makes the sandbox mock answer with `apns-unique-id`, as Apple's does.
    /// `bulkLane` creates the bulk topic (otherwise Herald is pointed at one that does not exist).
    init(
        partitions: Int = 3,
        bulkLane: Bool = false,
        unregisteredTokens: [String: Int64] = [:],
        faults: MockAPNSFaults = .none,
        otherKeyIDs: [String] = [],
        clientCertificateAuthority: String? = nil,
        sandboxUniqueIDs: Bool = false,
        fcmInvalidTokens: Set<String> = [],
        fcmDisabled: Bool = false,
        fcmRotatedKey: Bool = false,
        fcmMetadataServer: Bool = false
    ) throws {
        let directory = try TestEnvironment.temporaryDirectory()
        let key = try TestProviderKey(directory: directory)
        let otherKeys = try otherKeyIDs.map { try TestProviderKey(directory: directory, keyID: $0) }
        self.otherKeys = otherKeys
        let providerKeys = Dictionary(uniqueKeysWithValues: ([key] + otherKeys).map { ($0.keyID, $0.privateKey.publicKey) })
        let logger = Logger(label: "test")
        self.directory = directory
        self.key = key
        topics = try TestTopics(partitions: partitions, bulkLane: bulkLane)
        func mock(_ name: String, faults: MockAPNSFaults = .none, uniqueIDs: Bool = false) -> MockAPNSServer {
            var configuration = MockAPNSConfiguration(
                caCertificatePath: directory.appendingPathComponent("\(name)-ca.pem").path,
                providerKeys: providerKeys,
                teamID: key.teamID,
                unregisteredTokens: unregisteredTokens,
                faults: faults,
                clientCertificateAuthorityPath: clientCertificateAuthority
            )
            configuration.returnsUniqueIDs = uniqueIDs
            return MockAPNSServer(configuration: configuration, logger: logger)
        }
        self.logger = logger
        production = mock("production", faults: faults)
        sandbox = mock("sandbox", uniqueIDs: sandboxUniqueIDs)
        var fcmConfiguration = MockFCMConfiguration(
            caCertificatePath: directory.appendingPathComponent("fcm-ca.pem").path,
            serviceAccounts: ([Self.fcmKey] + (fcmRotatedKey ? [Self.fcmRotatedKey] : [])).map { [fcmProjectID] key in
                MockFCMServiceAccount(projectID: fcmProjectID, clientEmail: Self.fcmClientEmail(fcmProjectID), publicKey: key.publicKey)
            }
        )
        fcmConfiguration.invalidTokens = fcmInvalidTokens
        if fcmDisabled { fcmConfiguration.disabledProjects = [fcmProjectID] }
        if fcmMetadataServer { fcmConfiguration.metadataServerProjectID = fcmProjectID }
        fcm = MockFCMServer(configuration: fcmConfiguration, logger: logger)
        producer = try KafkaProducer(configuration: try TestEnvironment.kafka, logger: logger)
    }

    /// Runs `body` while both mock APNs servers and the mock FCM serve.
    func withMocks<Result: Sendable>(_ body: () async throws -> Result) async throws -> Result {
        try await withRunningServices(ServiceGroup(services: [production, sandbox, fcm], logger: logger), body)
    }

    /// The RSA key of the service account the mock FCM trusts (one for the run: generating one
    /// takes a while).
    static let fcmKey = try! _RSA.Signing.PrivateKey(keySize: .bits2048)

    /// A second key of the same service account (`fcmRotatedKey: true`), for key rotation.
    static let fcmRotatedKey = try! _RSA.Signing.PrivateKey(keySize: .bits2048)

    static func fcmClientEmail(_ projectID: String) -> String { "herald@\(projectID).iam.gserviceaccount.com" }

    /// Writes a service-account key file for ``fcmProjectID`` whose `token_uri` is the mock's
    /// (call inside `withMocks`), signed with `key` (the trusted one by default) whose
    /// `private_key_id` is `keyID`; returns its path.
    func writeFCMServiceAccount(
        named name: String = "fcm-service-account.json",
        key: _RSA.Signing.PrivateKey = fcmKey,
        keyID: String = "test-key"
    ) async throws -> String {
        let account = FCMServiceAccount(
            projectID: fcmProjectID,
            privateKeyID: keyID,
            privateKeyPEM: key.pkcs8PEMRepresentation,
            clientEmail: Self.fcmClientEmail(fcmProjectID),
            tokenURI: "https://127.0.0.1:\(try await fcm.listeningPort())/token"
        )
        let path = directory.appendingPathComponent(name).path
        try Data(account.json).write(to: URL(fileURLWithPath: path))
        return path
    }

    /// Herald's environment for this testbed (call inside `withMocks`); `group` names the
    /// consumer group, so two instances can share one or read everything again.
    func heraldEnvironment(group: String) async throws -> [String: String] {
        let productionPort = try await production.listeningPort()
        let sandboxPort = try await sandbox.listeningPort()
        let bundle = directory.appendingPathComponent("ca-bundle.pem").path
        let pems = try ["production", "sandbox"].map {
            try String(contentsOfFile: directory.appendingPathComponent("\($0)-ca.pem").path, encoding: .utf8)
        }
        try pems.joined(separator: "\n").write(toFile: bundle, atomically: true, encoding: .utf8)
        var environment = topics.environment
        environment["HERALD_KAFKA_BROKERS"] = try TestEnvironment.brokers
        environment["HERALD_KAFKA_GROUP"] = group
        for (property, value) in TestEnvironment.kafkaProperties {
            environment["HERALD_KAFKA_" + property.uppercased().replacingOccurrences(of: ".", with: "_")] = value
        }
        // Tansu keeps a crashed member in the group until the rebalance timeout (this).
        environment["HERALD_KAFKA_MAX_POLL_INTERVAL_MS"] = "15000"
        environment["HERALD_POSTGRES_URL"] = try TestEnvironment.postgresURL
        environment["HERALD_APNS_KEY_PATH"] = key.path
        environment["HERALD_APNS_KEY_ID"] = key.keyID
        environment["HERALD_APNS_TEAM_ID"] = key.teamID
        environment["HERALD_APNS_PRODUCTION_URL"] = "https://127.0.0.1:\(productionPort)"
        environment["HERALD_APNS_SANDBOX_URL"] = "https://127.0.0.1:\(sandboxPort)"
        // The mocks also serve Apple's channel management API.
        environment["HERALD_APNS_CHANNELS_PRODUCTION_URL"] = "https://127.0.0.1:\(productionPort)"
        environment["HERALD_APNS_CHANNELS_SANDBOX_URL"] = "https://127.0.0.1:\(sandboxPort)"
        environment["HERALD_APNS_CA_PATH"] = bundle
        environment["HERALD_FCM_URL"] = "https://127.0.0.1:\(try await fcm.listeningPort())"
        environment["HERALD_FCM_CA_PATH"] = directory.appendingPathComponent("fcm-ca.pem").path
        environment["HERALD_FCM_SERVICE_ACCOUNT_PATH"] = try await writeFCMServiceAccount()
        environment["HERALD_HTTP_PORT"] = "0"
        return environment
    }

    /// ``heraldEnvironment(group:)`` with a health and metrics port of Herald's own.
    func heraldEnvironmentServingHTTP(group: String) async throws -> (environment: [String: String], httpPort: Int) {
        var environment = try await heraldEnvironment(group: group)
        let httpPort = try freePort()
        environment["HERALD_HTTP_PORT"] = String(httpPort)
        return (environment, httpPort)
    }

    /// Applies the migrations, then starts `herald run` with `environment`, logging to the
    /// testbed's `herald.log`.
    func startHerald(_ environment: [String: String]) async throws -> HeraldProcess {
        _ = try await heraldConfiguration(group: "migrate-only")
        return try HeraldProcess(environment: environment, logPath: directory.appendingPathComponent("herald.log").path)
    }

    /// Herald's configuration (migrations applied), as `herald run` would read it.
    func heraldConfiguration(group: String) async throws -> HeraldConfiguration {
        let configuration = try await HeraldConfiguration(environment: try await heraldEnvironment(group: group))
        try await HeraldApplication.migrate(configuration: configuration, logger: logger)
        return configuration
    }

    /// Registers devices through push.tokens and waits until PostgreSQL has them all.
    func register(_ devices: [TestDevice]) async throws {
        for device in devices {
            try await producer.send(
                KafkaOutgoingMessage(
                    topic: topics.tokens,
                    key: Array(device.token.utf8),
                    value: Array(
                        """
                        {"action":"register","user_id":"\(device.user)","token":"\(device.token)","topic":"\(bundleID)",
                         "environment":"\(device.environment)","timestamp":"2026-11-21T10:00:00Z"}
                        """.utf8
                    )
                )
            )
        }
    }

    /// Waits until PostgreSQL has `count` active tokens of `users` for this testbed's app.
    func waitForActiveTokens(users: [String], count: Int) async throws {
        try await HeraldApplication.withTokenStore(postgresURL: try PostgresURL(TestEnvironment.postgresURL), logger: logger) { store in
            let clock = ContinuousClock()
            let deadline = clock.now + .seconds(60)
            while clock.now < deadline {
                let tokens = try await store.activeTokens(topic: bundleID, userIDs: users, environment: nil)
                if tokens.values.map(\.count).reduce(0, +) >= count { return }
                try await Task.sleep(for: .milliseconds(200))
            }
            throw TestFailure("the token registrations did not reach PostgreSQL within 60 s")
        }
    }

    /// Publishes one notification event for `users`.
    func publishEvent(id: String, users: [String]) async throws {
        let list = users.map { "\"\($0)\"" }.joined(separator: ",")
        try await producer.send(
            KafkaOutgoingMessage(
                topic: topics.requests,
                key: Array(id.utf8),
                value: Array(
                    """
                    {"id":"\(id)","user_ids":[\(list)],"topic":"\(bundleID)","collapse_id":"c-\(id)",
                     "payload":{"aps":{"alert":{"title":"Shipped","body":"Order \(id)"}}}}
                    """.utf8
                )
            )
        )
    }

    /// How many pushes `device` received at its own environment's mock, and at the other one.
    func pushCounts(_ device: TestDevice) -> (right: Int, wrong: Int) {
        let (right, wrong) = device.environment == "sandbox" ? (sandbox, production) : (production, sandbox)
        return (right.pushCount(token: device.token), wrong.pushCount(token: device.token))
    }
}

/// A device registered in a test.
struct TestDevice: Sendable {
    var user: String
    var token: String
    var environment: String

    /// `users` × (one production and one sandbox device).
    static func twoPerUser(_ users: [String]) -> [TestDevice] {
        users.flatMap { user in
            ["production", "sandbox"].map { TestDevice(user: user, token: randomToken(), environment: $0) }
        }
    }

    static func randomToken() -> String {
        (0..<32).map { _ in String(format: "%02x", UInt8.random(in: 0...255)) }.joined()
    }
}

/// A push.results record, decoded.
struct ResultRecord: Hashable {
    var eventID: String
    var token: String?
    var status: String
    var value: [UInt8]

    init?(_ message: KafkaMessage) {
        guard let json = message.json, let eventID = json["event_id"] as? String, let status = json["status"] as? String,
            let value = message.value
        else { return nil }
        self.eventID = eventID
        self.token = json["token"] as? String
        self.status = status
        self.value = value
    }

    var key: String { "\(eventID)|\(token ?? "-")" }
}
