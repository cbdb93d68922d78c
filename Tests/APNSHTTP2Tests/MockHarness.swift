import APNSCore
import Crypto
import Foundation
import Logging
import MockAPNS
import MockServerSupport
import NIOPosix
import PushPipeline
import SwiftASN1
import Synchronization
import Testing
import X509

@testable import APNSHTTP2

/// Runs a mock APNs with any configuration and an ``APNSHTTP2Client`` pointed at it over real
/// TLS, for the sender-level integration tests.
struct MockHarness: Sendable {
    var server: MockAPNSServer
    var client: APNSHTTP2Client
    var caPath: String

    static let logger = Logger(label: "apns-harness", factory: { _ in SwiftLogNoOpLogHandler() })

    /// Starts `mock` (its CA path is set here), builds the client with `configure` applied to a
    /// configuration that trusts the mock, runs `body`, then stops both.
    static func run(
        mock: MockAPNSConfiguration,
        authentication: APNSClientConfiguration.Authentication,
        configure: @Sendable (inout APNSClientConfiguration) -> Void = { _ in },
        _ body: @Sendable (MockHarness) async throws -> Void
    ) async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        var mock = mock
        mock.caCertificatePath = directory.path("mock-ca.pem")
        mock.requestLogLimit = min(mock.requestLogLimit, 1000)
        let server = MockAPNSServer(configuration: mock, logger: logger)
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await server.run() }
            do {
                let port = try await server.listeningPort()
                let endpoint = APNSClientConfiguration.Endpoint(host: "127.0.0.1", port: port)
                var configuration = APNSClientConfiguration(
                    authentication: authentication,
                    production: endpoint,
                    sandbox: endpoint,
                    additionalTrustRootsPEMPath: mock.caCertificatePath
                )
                configure(&configuration)
                let client = try APNSHTTP2Client(configuration: configuration, logger: logger)
                group.addTask { try await client.run() }
                try await body(MockHarness(server: server, client: client, caPath: mock.caCertificatePath!))
            } catch {
                group.cancelAll()
                throw error
            }
            group.cancelAll()
            try await group.waitForAll()
        }
    }

    /// One alert notification; the token is derived from `index` so every index is a distinct device.
    static func request(_ index: Int, topic: String = "com.example.shop", pushType: APNSPushType = .alert)
        -> APNSRequest
    {
        APNSRequest(
            deviceToken: deviceToken(index),
            topic: topic,
            pushType: pushType,
            priority: pushType.defaultPriority,
            apnsID: UUID().uuidString.lowercased(),
            payload: Array(#"{"aps":{"alert":{"title":"Shipped","body":"Your order is on its way"}}}"#.utf8)
        )
    }

    /// A 64-digit hex device token for `index`.
    static func deviceToken(_ index: Int) -> String {
        String(repeating: "0", count: 48) + String(format: "%016x", index)
    }

    /// Delivers `count` notifications through `sender` with at most `window` in flight at once;
    /// returns the outcomes by index. `batched`: in batches of `window`, one
    /// ``RetryingSender/deliverAll(_:consumedAt:fence:report:)`` each, as the pipeline sends.
    static func deliverAll(
        _ count: Int,
        window: Int,
        sender: RetryingSender,
        batched: Bool = false,
        request: @escaping @Sendable (Int) -> APNSRequest = { request($0) }
    ) async throws -> [DeliveryOutcome] {
        if batched {
            let outcomes = Mutex([Int: Result<DeliveryOutcome, DeliveryStopped>]())
            for start in stride(from: 0, to: count, by: window) {
                let batch = (start..<min(start + window, count)).map { (request: request($0), environment: APNSEnvironment.production) }
                await sender.deliverAll(batch, consumedAt: .now, fence: { _ in .open }) { index, outcome in
                    outcomes.withLock { $0[start + index] = outcome }
                }
            }
            return try outcomes.withLock { outcomes in try (0..<count).map { try #require(outcomes[$0]).get() } }
        }
        return try await withThrowingTaskGroup(of: (Int, DeliveryOutcome).self) { group in
            var outcomes = [DeliveryOutcome?](repeating: nil, count: count)
            var next = 0
            func startNext() {
                let index = next
                next += 1
                group.addTask {
                    (index, try await sender.deliver(request(index), environment: .production, consumedAt: .now))
                }
            }
            while next < min(window, count) { startNext() }
            for try await (index, outcome) in group {
                outcomes[index] = outcome
                if next < count { startNext() }
            }
            return outcomes.map { $0! }
        }
    }
}

/// A fresh directory under the system's temporary directory; call `remove()` when done.
struct TemporaryDirectory: Sendable {
    let url: URL

    init() throws {
        url = FileManager.default.temporaryDirectory.appendingPathComponent("apns-tests-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
    }

    func path(_ name: String) -> String {
        url.appendingPathComponent(name).path
    }

    func remove() {
        try? FileManager.default.removeItem(at: url)
    }
}

/// A certificate authority and a client certificate it issued, written as PEM files, for mutual TLS.
struct ClientCertificateFiles {
    var caPath: String
    var certificatePath: String
    var privateKeyPath: String

    /// Generates a P-256 CA and a client certificate (extended key usage clientAuth) in `directory`.
    static func generate(in directory: TemporaryDirectory, name: String = "client") throws -> ClientCertificateFiles {
        let authority = try CertificateAuthority(commonName: "\(name) CA", validity: 86_400)
        let client = try authority.issue(commonName: "Apple Push Services: com.example.shop", usage: .clientAuth)
        let files = ClientCertificateFiles(
            caPath: directory.path("\(name)-ca.pem"),
            certificatePath: directory.path("\(name)-cert.pem"),
            privateKeyPath: directory.path("\(name)-key.pem")
        )
        try authority.pem.write(toFile: files.caPath, atomically: true, encoding: .utf8)
        try client.certificate.serializeAsPEM().pemString.write(toFile: files.certificatePath, atomically: true, encoding: .utf8)
        try client.privateKey.pemRepresentation.write(toFile: files.privateKeyPath, atomically: true, encoding: .utf8)
        return files
    }

    /// Bundles the certificate and key as PKCS#12 with `password` using the `openssl` command
    /// (swift-certificates writes no PKCS#12); nil when `openssl` is not installed.
    func exportPKCS12(to path: String, password: String) throws -> String? {
        guard
            let openssl = ["/usr/bin/openssl", "/usr/local/bin/openssl"].first(where: {
                FileManager.default.isExecutableFile(atPath: $0)
            })
        else { return nil }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: openssl)
        process.arguments = [
            "pkcs12", "-export", "-in", certificatePath, "-inkey", privateKeyPath,
            "-out", path, "-passout", "pass:\(password)", "-name", "herald-test",
        ]
        try process.run()
        process.waitUntilExit()
        guard process.terminationStatus == 0 else { return nil }
        return path
    }
}
