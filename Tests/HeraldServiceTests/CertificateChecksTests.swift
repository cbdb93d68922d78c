import APNSHTTP2
import Crypto
import Foundation
import HeraldService
import Logging
import Prometheus
import SwiftASN1
import Testing
import X509

/// Start-up reports on APNs certificates: expired (or soon), and not issued for a bundle ID
/// they are configured for (Apple's topics extension).
@Suite struct CertificateChecksTests {
    /// Writes a certificate for `topics`, valid until `notValidAfter`, and its key, as PEM.
    static func writeCertificate(topics: [String], notValidAfter: Date, in directory: URL) throws -> (certificate: String, key: String) {
        let key = P256.Signing.PrivateKey()
        var serializer = DER.Serializer()
        try serializer.appendConstructedNode(identifier: .sequence) { coder in
            for topic in topics {
                try coder.serialize(ASN1UTF8String(topic))
                try coder.appendConstructedNode(identifier: .sequence) { try $0.serialize(ASN1UTF8String("app")) }
            }
        }
        let name = try DistinguishedName { CommonName("Apple Push Services: \(topics.first ?? "")") }
        let certificate = try Certificate(
            version: .v3,
            serialNumber: Certificate.SerialNumber(),
            publicKey: Certificate.PublicKey(key.publicKey),
            notValidBefore: notValidAfter.addingTimeInterval(-365 * 86_400),
            notValidAfter: notValidAfter,
            issuer: name,
            subject: name,
            signatureAlgorithm: .ecdsaWithSHA256,
            extensions: Certificate.Extensions([
                Certificate.Extension(oid: [1, 2, 840, 113635, 100, 6, 3, 6], critical: false, value: serializer.serializedBytes[...])
            ]),
            issuerPrivateKey: Certificate.PrivateKey(key)
        )
        let certificatePath = directory.appendingPathComponent("push-\(UUID().uuidString).pem").path
        let keyPath = directory.appendingPathComponent("push-key-\(UUID().uuidString).pem").path
        try certificate.serializeAsPEM().pemString.write(toFile: certificatePath, atomically: true, encoding: .utf8)
        try key.pemRepresentation.write(toFile: keyPath, atomically: true, encoding: .utf8)
        return (certificatePath, keyPath)
    }

    @Test func anExpiredCertificateAndAListedAppItWasNotIssuedForAreReported() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("certificate-checks-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let expired = try Self.writeCertificate(topics: ["com.example.shop"], notValidAfter: Date().addingTimeInterval(-3600), in: directory)
        let valid = try Self.writeCertificate(
            topics: ["com.example.news", "com.example.news.voip"], notValidAfter: Date().addingTimeInterval(400 * 86_400), in: directory)
        let file = directory.appendingPathComponent("credentials.json").path
        try """
        [{"topics": ["com.example.shop"], "cert_path": "\(expired.certificate)", "cert_key_path": "\(expired.key)"},
         {"topics": ["com.example.news", "com.example.other"], "cert_path": "\(valid.certificate)", "cert_key_path": "\(valid.key)"}]
        """.write(toFile: file, atomically: true, encoding: .utf8)

        let problems = try await HeraldConfiguration.read(environment: ["HERALD_CREDENTIALS_FILE": file]).report.certificateProblems
        #expect(problems.count == 2, "\(problems)")
        #expect(problems.contains { $0.contains("entry 1: the certificate expired at") }, "\(problems)")
        #expect(
            problems.contains {
                $0.contains("entry 2: the certificate was not issued for com.example.other (its topics: com.example.news, com.example.news.voip)")
            }, "\(problems)")

        let soon = try Self.writeCertificate(topics: ["com.example.shop"], notValidAfter: Date().addingTimeInterval(10 * 86_400), in: directory)
        let environmentCertificate = try await HeraldConfiguration.read(environment: [
            "HERALD_APNS_CERT_PATH": soon.certificate, "HERALD_APNS_CERT_KEY_PATH": soon.key,
        ]).report
        #expect(environmentCertificate.certificateProblems.count == 1)
        #expect(environmentCertificate.certificateProblems.first?.contains("in less than 30 days") == true)
    }

    /// `herald_tls_certificate_expiry_timestamp_seconds{kind="apns_client"}` holds the earliest
    /// expiry of the APNs client certificates in use, the default one included, and follows the
    /// credentials file when a reload applies it.
    @Test func theEarliestAPNsCertificateExpiryIsExportedAndFollowsAReload() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("certificate-expiry-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let inAYear = Date(timeIntervalSince1970: 1_830_000_000)
        let inTwoYears = Date(timeIntervalSince1970: 1_860_000_000)
        let inAMonth = Date(timeIntervalSince1970: 1_800_000_000)
        let defaultCertificate = try Self.writeCertificate(topics: ["com.example.shop"], notValidAfter: inTwoYears, in: directory)
        let listed = try Self.writeCertificate(topics: ["com.example.news"], notValidAfter: inAYear, in: directory)
        let file = directory.appendingPathComponent("credentials.json").path
        func list(_ certificate: (certificate: String, key: String)) throws {
            try #"[{"topics": ["com.example.news"], "cert_path": "\#(certificate.certificate)", "cert_key_path": "\#(certificate.key)"}]"#
                .write(toFile: file, atomically: true, encoding: .utf8)
        }
        try list(listed)
        let registry = PrometheusCollectorRegistry()
        let reloader = CredentialsReloader(
            path: file,
            defaultCredential: .certificate(pemCertificatePath: defaultCertificate.certificate, pemPrivateKeyPath: defaultCertificate.key),
            clients: [],
            checkInterval: .seconds(3600),
            metricsFactory: PrometheusMetricsFactory(registry: registry),
            logger: Logger(label: "test")
        )
        func exported() -> String? {
            registry.emitToString().split(separator: "\n")
                .first { $0.hasPrefix(#"herald_tls_certificate_expiry_timestamp_seconds{kind="apns_client"}"#) }
                .map { String($0.split(separator: " ").last ?? "") }
        }
        #expect(exported() == nil, "no series before the reloader ran")
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await reloader.run() }
            defer { group.cancelAll() }
            let deadline = ContinuousClock.now + .seconds(10)
            while exported() == nil, ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(20)) }
            #expect(exported() == "1830000000.0", "the listed certificate's expiry, earlier than the default one's")

            let renewed = try Self.writeCertificate(topics: ["com.example.news"], notValidAfter: inAMonth, in: directory)
            try list(renewed)
            reloader.reload(trigger: "test")
            #expect(exported() == "1800000000.0")

            try #"[]"#.write(toFile: file, atomically: true, encoding: .utf8)
            reloader.reload(trigger: "test")
            #expect(exported() == "1860000000.0", "the default certificate alone")
        }
    }
}
