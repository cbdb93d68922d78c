import Crypto
import Foundation
import HeraldService
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
}
