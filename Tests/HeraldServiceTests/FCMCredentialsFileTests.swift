import APNSHTTP2
import FCMCore
import FCMHTTP
import Foundation
import HeraldService
import Logging
import MockFCM
import Prometheus
import Testing
import _CryptoExtras

/// The credentials file's FCM entries, HERALD_FCM_*, and their reload.
@Suite struct FCMCredentialsFileTests {
    /// One RSA key for the suite: generating one takes a while.
    static let key = try! _RSA.Signing.PrivateKey(keySize: .bits2048)

    /// A service-account key file for `project` in `directory` (relative name `name`).
    static func writeServiceAccount(
        project: String,
        named name: String,
        in directory: URL,
        keyPEM: String? = nil,
        tokenURI: String = "https://127.0.0.1:1/token"
    ) throws {
        let account = FCMServiceAccount(
            projectID: project,
            privateKeyID: "key-\(project)",
            privateKeyPEM: keyPEM ?? key.pkcs8PEMRepresentation,
            clientEmail: "herald@\(project).iam.gserviceaccount.com",
            tokenURI: tokenURI
        )
        try Data(account.json).write(to: directory.appendingPathComponent(name))
    }

    @Test func fcmEntriesSitBesideAPNsOnesAndTheDefaultAccountServesTheRest() async throws {
        try await APNSCredentialsFileTests.withFiles { directory in
            try Self.writeServiceAccount(project: "shop-project", named: "shop-firebase.json", in: directory)
            try Self.writeServiceAccount(project: "default-project", named: "default-firebase.json", in: directory)
            let path = try APNSCredentialsFileTests.write(
                """
                [
                  {"topics": ["com.example.shop"], "key_path": "keys/AuthKey.p8", "key_id": "ABC123DEFG", "team_id": "TEAM123456"},
                  {"platform": "fcm", "packages": ["com.example.shop", "com.example.shop.lite"], "service_account_path": "shop-firebase.json"}
                ]
                """,
                in: directory
            )
            #expect(try CredentialsFile.load(path: path).keys.sorted() == ["com.example.shop"], "APNs reads its own entries only")
            let entries = try CredentialsFile.fcmEntries(path: path)
            #expect(entries.map(\.packages) == [["com.example.shop", "com.example.shop.lite"]])
            #expect(entries.first?.serviceAccount.projectID == "shop-project")

            let (configuration, report) = try await HeraldConfiguration.read(environment: [
                "HERALD_CREDENTIALS_FILE": path,
                "HERALD_FCM_SERVICE_ACCOUNT_PATH": directory.appendingPathComponent("default-firebase.json").path,
                "HERALD_FCM_URL": "https://127.0.0.1:8443",
                "HERALD_FCM_CONNECTIONS": "4",
            ])
            let fcm = try #require(configuration.fcm)
            #expect(fcm.baseURL == "https://127.0.0.1:8443")
            #expect(fcm.connections == 4)
            #expect(fcm.credentials.serviceAccount(for: "com.example.shop.lite")?.projectID == "shop-project")
            #expect(fcm.credentials.serviceAccount(for: "com.other.app")?.projectID == "default-project")
            #expect(report.unknownKeys.isEmpty)

            let printed = OperatorCommands.describe(configuration, report: report).joined(separator: "\n")
            #expect(printed.contains("fcm endpoint: https://127.0.0.1:8443, trust roots system"))
            #expect(printed.contains("fcm credential for com.example.shop, com.example.shop.lite: service account herald@shop-project"))
            #expect(printed.contains("set: HERALD_FCM_URL = [string: https://127.0.0.1:8443] (environment)"))
            #expect(!printed.contains("PRIVATE KEY"), "key material is never printed")
        }
    }

    @Test func withoutAnyFCMCredentialNoFCMClientIsConfigured() async throws {
        let (configuration, report) = try await HeraldConfiguration.read(environment: [:])
        #expect(configuration.fcm == nil)
        #expect(report.defaultsApplied["HERALD_FCM_URL"] == "https://fcm.googleapis.com")
        #expect(report.defaultsApplied["HERALD_FCM_CONNECTIONS"] == "2")
        #expect(OperatorCommands.describe(configuration, report: report).contains { $0.hasPrefix("fcm: no credential") })
    }

    /// With HERALD_FCM_PROJECT_ID alone the metadata server serves the project's tokens; with
    /// a key file too, the key's project must be the one named.
    @Test func aProjectIDAloneUsesTheMetadataServer() async throws {
        let configuration = try await HeraldConfiguration(environment: ["HERALD_FCM_PROJECT_ID": "shop-prod"])
        let account = try #require(configuration.fcm?.credentials.serviceAccount(for: "com.example.any"))
        #expect(account.usesMetadataServer && account.projectID == "shop-prod")
        #expect(account.tokenURI == "http://metadata.google.internal/computeMetadata/v1/instance/service-accounts/default/token")
        #expect(configuration.fcm?.fallbackPath == nil, "nothing to read again on SIGHUP")
        await #expect {
            _ = try await HeraldConfiguration(environment: ["HERALD_FCM_PROJECT_ID": "shop prod"])
        } throws: { "\($0)".contains("HERALD_FCM_PROJECT_ID is not a project id") }
        await #expect {
            _ = try await HeraldConfiguration(environment: ["HERALD_FCM_PROJECT_ID": "shop-prod", "HERALD_FCM_METADATA_URL": "ftp://metadata"])
        } throws: { "\($0)".contains("HERALD_FCM_METADATA_URL must be http[s]://host[:port]") }
    }

    @Test(arguments: ["0", "65", "many"])
    func aConnectionCountOutOfRangeIsRefused(value: String) async throws {
        await #expect {
            _ = try await HeraldConfiguration(environment: ["HERALD_FCM_CONNECTIONS": value])
        } throws: { error in
            "\(error)".contains("HERALD_FCM_CONNECTIONS must be an integer in 1...64")
        }
    }

    @Test(arguments: [
        (#"{"platform": "fcm", "service_account_path": "a.json"}"#, "entry 1: \"packages\" must list at least one Android package name"),
        (#"{"platform": "fcm", "packages": ["com.a"]}"#, "entry 1: give service_account_path"),
        (
            #"{"platform": "fcm", "packages": ["com.a"], "service_account_path": "a.json", "key_id": "ABC123DEFG"}"#,
            "an FCM entry takes packages and service_account_path only"
        ),
        (#"{"platform": "fcm", "packages": ["com.a"], "service_account_path": "missing.json"}"#, "cannot read HERALD_CREDENTIALS_FILE="),
        (#"{"platform": "fcm", "packages": ["com.a"], "service_account_path": "not-rsa.json"}"#, "private_key is not an RSA key"),
        (#"{"platform": "gcm", "topics": ["com.a"]}"#, "\"platform\" must be \"apns\", \"fcm\" or \"webpush\""),
    ])
    func aBadFCMEntryIsNamedWithoutKeyMaterial(entry: String, message: String) async throws {
        try await APNSCredentialsFileTests.withFiles { directory in
            try Self.writeServiceAccount(project: "a", named: "a.json", in: directory)
            let ecKey = try String(contentsOf: directory.appendingPathComponent("keys/AuthKey.p8"), encoding: .utf8)
            try Self.writeServiceAccount(project: "b", named: "not-rsa.json", in: directory, keyPEM: ecKey)
            let path = try APNSCredentialsFileTests.write("[\(entry)]", in: directory)
            let error = try #require(throws: ConfigurationError.self) {
                _ = try CredentialsFile.fcmEntries(path: path)
                _ = try CredentialsFile.load(path: path)
            }
            #expect(error.message.contains(message), "\(error.message)")
            #expect(!error.message.contains("BEGIN"))
        }
    }

    @Test func aPackageListedTwiceIsRefused() async throws {
        try await APNSCredentialsFileTests.withFiles { directory in
            try Self.writeServiceAccount(project: "a", named: "a.json", in: directory)
            let path = try APNSCredentialsFileTests.write(
                #"[{"platform": "fcm", "packages": ["com.a"], "service_account_path": "a.json"}, {"platform": "fcm", "packages": ["com.a"], "service_account_path": "a.json"}]"#,
                in: directory
            )
            let error = try #require(throws: ConfigurationError.self) { try CredentialsFile.fcmEntries(path: path) }
            #expect(error.message == "HERALD_CREDENTIALS_FILE=\(path) entry 2: the package com.a is listed twice in the file")
        }
    }

    /// A reload gives the FCM client the file's entries; a bad entry keeps the previous ones
    /// and is counted as a failed reload. A mock FCM shows which project each message went to.
    @Test func aReloadAppliesFCMEntriesAndABadOneKeepsThePrevious() async throws {
        try await APNSCredentialsFileTests.withFiles { directory in
            let caPath = directory.appendingPathComponent("mock-fcm-ca.pem").path
            let logger = Logger(label: "test", factory: { _ in SwiftLogNoOpLogHandler() })
            let mock = MockFCMServer(
                configuration: MockFCMConfiguration(
                    caCertificatePath: caPath,
                    serviceAccounts: ["default-project", "new-project"].map {
                        MockFCMServiceAccount(projectID: $0, clientEmail: "herald@\($0).iam.gserviceaccount.com", publicKey: Self.key.publicKey)
                    }
                ),
                logger: logger
            )
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask { try await mock.run() }
                defer { group.cancelAll() }
                let port = try await mock.listeningPort()
                for project in ["default-project", "new-project"] {
                    try Self.writeServiceAccount(project: project, named: "\(project).json", in: directory, tokenURI: "https://127.0.0.1:\(port)/token")
                }
                let path = try APNSCredentialsFileTests.write("[]", in: directory)
                let configuration = try await HeraldConfiguration(environment: [
                    "HERALD_CREDENTIALS_FILE": path,
                    "HERALD_FCM_SERVICE_ACCOUNT_PATH": directory.appendingPathComponent("default-project.json").path,
                    "HERALD_FCM_URL": "https://127.0.0.1:\(port)",
                    "HERALD_FCM_CA_PATH": caPath,
                ])
                let fcmConfiguration = try #require(configuration.fcm)
                let client = try FCMHTTPClient(configuration: fcmConfiguration, logger: logger)
                group.addTask { try await client.run() }
                let registry = PrometheusCollectorRegistry()
                let reloader = CredentialsReloader(
                    path: path,
                    defaultCredential: nil,
                    clients: [],
                    fcm: .init(client: client, credentials: fcmConfiguration.credentials, fallbackPath: fcmConfiguration.fallbackPath),
                    checkInterval: .seconds(3600),
                    metricsFactory: PrometheusMetricsFactory(registry: registry),
                    logger: logger
                )
                /// Sends a message for `package`; returns the project FCM received it for.
                func project(of package: String) async throws -> String? {
                    let token = "token-\(UUID().uuidString)"
                    let part = try FCMEventPart(
                        json: Array(#"{"package":"\#(package)","message":{"data":{"k":"v"}}}"#.utf8),
                        priority: 10,
                        expiration: nil,
                        collapseID: nil,
                        nowMilliseconds: 0
                    )
                    let response = try await client.send(part.request(to: .token(token)), deadline: .now + .seconds(10))
                    #expect(response.status == 200)
                    let path = mock.receivedMessages().first { $0.target == token }?.path
                    return path?.split(separator: "/").dropFirst(2).first.map(String.init)
                }
                func reloads(_ result: String) -> Bool {
                    registry.emitToString().contains("herald_credentials_reloads_total{result=\"\(result)\"} 1")
                }
                #expect(try await project(of: "com.new") == "default-project")

                try #"[{"platform": "fcm", "packages": ["com.new"], "service_account_path": "new-project.json"}]"#
                    .write(toFile: path, atomically: true, encoding: .utf8)
                reloader.reload(trigger: "test")
                #expect(reloads("applied"))
                #expect(try await project(of: "com.new") == "new-project")
                #expect(try await project(of: "com.other") == "default-project", "the default account serves the rest")

                try #"[{"platform": "fcm", "packages": ["com.new"], "service_account_path": "missing.json"}]"#
                    .write(toFile: path, atomically: true, encoding: .utf8)
                reloader.reload(trigger: "test")
                #expect(reloads("failed"))
                #expect(try await project(of: "com.new") == "new-project", "the previous entries stay")

                try "[]".write(toFile: path, atomically: true, encoding: .utf8)
                reloader.reload(trigger: "test")
                #expect(try await project(of: "com.new") == "default-project", "a removed entry's packages go to the default")

                // Issue 49, finding 3: HERALD_FCM_SERVICE_ACCOUNT_PATH is read again too.
                try Self.writeServiceAccount(
                    project: "new-project", named: "default-project.json", in: directory, tokenURI: "https://127.0.0.1:\(port)/token")
                reloader.reload(trigger: "test")
                #expect(try await project(of: "com.other") == "new-project", "the default key file was read again")
            }
        }
    }
}
