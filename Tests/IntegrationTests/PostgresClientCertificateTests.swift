import Foundation
import MockAPNS
import SwiftASN1
import Testing
import X509

/// Herald on a PostgreSQL that takes Herald's role only with a client certificate over TLS
/// (scripts/services.sh: `hostssl ... cert` for the role herald_cert, a private CA, a server
/// certificate for 127.0.0.1), configured only through the documented keys and files: the URL
/// from HERALD_POSTGRES_URL_FILE with `sslmode=verify-full`, `sslrootcert`, `sslcert` and `sslkey`.
@Suite(.timeLimit(.minutes(2)))
struct PostgresClientCertificateTests {
    /// The local PostgreSQL's TLS directory (its CA, the client certificate of herald_cert) and
    /// port; nil, said once, when the services have no TLS.
    static func postgresWithTLS() -> (directory: String, port: Int)? {
        guard let tls = ProcessInfo.processInfo.environment["HERALD_TEST_POSTGRES_TLS_DIR"],
            let plain = ProcessInfo.processInfo.environment["HERALD_POSTGRES_URL"],
            let port = URLComponents(string: plain)?.port
        else {
            print("PostgresClientCertificateTests: skipped, the local services have no TLS (openssl missing?)")
            return nil
        }
        return (tls, port)
    }

    @Test func heraldConnectsWithVerifyFullAndAClientCertificateAndIsRefusedWithout() async throws {
        guard let (tls, port) = Self.postgresWithTLS() else { return }
        let directory = try TestEnvironment.temporaryDirectory()
        let base = "postgres://herald_cert@127.0.0.1:\(port)/herald?sslmode=verify-full&sslrootcert=\(tls)/ca.pem"
        func migrate(_ url: String) async throws -> (status: Int32, output: String, errors: String) {
            let file = directory.appendingPathComponent("postgres-url-\(UUID().uuidString)")
            // As a mounted Secret holds it: the URL and a final newline.
            try Data((url + "\n").utf8).write(to: file)
            return try await OperatorCommandsTests.herald(["migrate"], environment: ["HERALD_POSTGRES_URL_FILE": file.path])
        }
        let withCertificate = try await migrate(base + "&sslcert=\(tls)/client.pem&sslkey=\(tls)/client.key")
        #expect(withCertificate.status == 0, "\(withCertificate.errors)")
        #expect(withCertificate.errors.contains("delivery ledger partitions"), "\(withCertificate.errors)")

        // Refused by the server: said at once, with the server's reason, not after the pool's
        // minute of retries.
        let started = ContinuousClock.now
        let withoutCertificate = try await migrate(base)
        #expect(withoutCertificate.status != 0, "the server takes herald_cert only with its certificate")
        #expect(started.duration(to: .now) < .seconds(10))
        let reason = "refused the connection: connection requires a valid client certificate (SQLSTATE 28000)"
        #expect(withoutCertificate.errors.contains(reason), "\(withoutCertificate.errors)")

        let unreadableKey = try await migrate(base + "&sslcert=\(tls)/client.pem&sslkey=\(tls)/missing.key")
        #expect(unreadableKey.status == 2, "a key that cannot be used is a configuration error at start-up")
        #expect(unreadableKey.errors.contains("sslkey"), "\(unreadableKey.errors)")
    }

    /// The drill of a renewed client certificate: replaced on disk while Herald runs, it cannot be
    /// taken up by the running pool, so Herald stops gracefully by itself (exit 0, within the
    /// periodic check), starts again as an orchestrator would start it, and keeps delivering; the
    /// expiry gauge shows the first certificate's expiry, then the new one's.
    @Test func aClientCertificateReplacedOnDiskIsTakenUpByAGracefulRestart() async throws {
        guard let (tls, port) = Self.postgresWithTLS() else { return }
        let testbed = try HeraldTestbed()
        let certificate = testbed.directory.appendingPathComponent("client.pem")
        try FileManager.default.copyItem(atPath: "\(tls)/client.pem", toPath: certificate.path)
        let urlFile = testbed.directory.appendingPathComponent("postgres-url")
        try Data(
            "postgres://herald_cert@127.0.0.1:\(port)/herald?sslmode=verify-full&sslrootcert=\(tls)/ca.pem&sslcert=\(certificate.path)&sslkey=\(tls)/client.key\n"
                .utf8
        ).write(to: urlFile)
        /// The certificate's expiry in whole seconds since 1970, as the gauge exports it.
        func expiry(_ path: String) throws -> Double {
            let pem = try PEMDocument(pemString: String(contentsOfFile: path, encoding: .utf8))
            return try Certificate(derEncoded: pem.derBytes).notValidAfter.timeIntervalSince1970.rounded(.down)
        }
        /// Polls `value` every 200 ms until it answers, for up to `seconds`.
        func eventually<Value>(seconds: Int, _ value: () throws -> Value?) async throws -> Value {
            let deadline = ContinuousClock.now + .seconds(seconds)
            while ContinuousClock.now < deadline {
                if let found = try value() { return found }
                try await Task.sleep(for: .milliseconds(200))
            }
            throw TestFailure("not within \(seconds) s")
        }
        // The renewal, made before Herald runs: a certificate for the same key with a later
        // expiry (the services' client certificates last 2 days).
        let renewed = testbed.directory.appendingPathComponent("renewed.pem")
        let openssl = Process()
        openssl.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        openssl.arguments = [
            "openssl", "x509", "-req", "-in", "\(tls)/client.csr", "-CA", "\(tls)/ca.pem", "-CAkey", "\(tls)/ca.key", "-CAcreateserial",
            "-days", "30", "-out", renewed.path,
        ]
        try openssl.run()
        openssl.waitUntilExit()
        #expect(openssl.terminationStatus == 0)
        try await testbed.withMocks {
            var (environment, httpPort) = try await testbed.heraldEnvironmentServingHTTP(group: "herald-\(UUID().uuidString)")
            environment["HERALD_POSTGRES_URL"] = nil
            environment["HERALD_POSTGRES_URL_FILE"] = urlFile.path
            environment["HERALD_CREDENTIALS_CHECK_S"] = "1"
            let device = TestDevice(user: "ana", token: TestDevice.randomToken(), environment: "production")
            func gauge() async throws -> Double {
                try await eventually(seconds: 30) {
                    guard let (status, body) = httpGet(port: httpPort, path: "/metrics"), status == 200 else { return nil }
                    return try PrometheusText(body).value("herald_tls_certificate_expiry_timestamp_seconds", ["kind": "postgres_client"])
                }
            }

            let first = try await testbed.startHerald(environment)
            try await testbed.register([device])
            try await testbed.waitForActiveTokens(users: ["ana"], count: 1)
            try await testbed.publishEvent(id: "before", users: ["ana"])
            _ = try await eventually(seconds: 30) { testbed.pushCounts(device).right == 1 ? true : nil }
            #expect(try await gauge() == (try expiry(certificate.path)))

            // Moved into place in one step, as the kubelet swaps a Secret's files.
            #expect(rename(renewed.path, certificate.path) == 0)
            let status = try await first.waitForExit(timeout: .seconds(30))
            #expect(status == 0, "a graceful stop, not a crash")
            #expect(try String(contentsOfFile: first.logPath, encoding: .utf8).contains("a TLS file changed on disk"))

            let second = try await testbed.startHerald(environment)
            defer { second.send(SIGTERM) }
            try await testbed.publishEvent(id: "after", users: ["ana"])
            _ = try await eventually(seconds: 60) { testbed.pushCounts(device).right == 2 ? true : nil }
            let renewedExpiry = try expiry(certificate.path)
            #expect(renewedExpiry > (try expiry("\(tls)/client.pem")) + 86_400, "the renewal expires later")
            #expect(try await gauge() == renewedExpiry)
        }
    }
}
