import Crypto
import Foundation
import NIOSSL
import SwiftASN1
import X509

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// A throw-away certificate authority and a server certificate it issued, made at start-up.
///
/// Clients trust ``certificateAuthorityPEM``; the server presents ``serverCertificate``, whose
/// subject alternative names cover `localhost`, `127.0.0.1`, `::1` and the configured host.
struct SelfSignedTLSIdentity {
    let certificateAuthorityPEM: String
    let serverCertificate: NIOSSLCertificate
    let serverPrivateKey: NIOSSLPrivateKey

    init(host: String) throws {
        let now = Date()
        // Backdate a little so clients with a slightly slow clock still accept the certificates.
        let notValidBefore = now.addingTimeInterval(-60 * 60)
        let notValidAfter = now.addingTimeInterval(60 * 60 * 24 * 365)

        let authorityKey = P256.Signing.PrivateKey()
        let authorityName = try DistinguishedName {
            OrganizationName("Herald")
            CommonName("Herald Mock APNs CA")
        }
        let authorityPublicKey = Certificate.PublicKey(authorityKey.publicKey)
        let authority = try Certificate(
            version: .v3,
            serialNumber: Certificate.SerialNumber(),
            publicKey: authorityPublicKey,
            notValidBefore: notValidBefore,
            notValidAfter: notValidAfter,
            issuer: authorityName,
            subject: authorityName,
            signatureAlgorithm: .ecdsaWithSHA256,
            extensions: try Certificate.Extensions {
                Critical(BasicConstraints.isCertificateAuthority(maxPathLength: 0))
                Critical(KeyUsage(keyCertSign: true, cRLSign: true))
                SubjectKeyIdentifier(hash: authorityPublicKey)
            },
            issuerPrivateKey: Certificate.PrivateKey(authorityKey)
        )

        let serverKey = P256.Signing.PrivateKey()
        let serverPublicKey = Certificate.PublicKey(serverKey.publicKey)
        let server = try Certificate(
            version: .v3,
            serialNumber: Certificate.SerialNumber(),
            publicKey: serverPublicKey,
            notValidBefore: notValidBefore,
            notValidAfter: notValidAfter,
            issuer: authorityName,
            subject: try DistinguishedName {
                OrganizationName("Herald")
                CommonName("localhost")
            },
            signatureAlgorithm: .ecdsaWithSHA256,
            extensions: try Certificate.Extensions {
                Critical(BasicConstraints.notCertificateAuthority)
                Critical(KeyUsage(digitalSignature: true))
                try ExtendedKeyUsage([.serverAuth])
                SubjectAlternativeNames(Self.subjectAlternativeNames(host: host))
                SubjectKeyIdentifier(hash: serverPublicKey)
                AuthorityKeyIdentifier(keyIdentifier: SubjectKeyIdentifier(hash: authorityPublicKey).keyIdentifier)
            },
            issuerPrivateKey: Certificate.PrivateKey(authorityKey)
        )

        self.certificateAuthorityPEM = try authority.serializeAsPEM().pemString
        var serializer = DER.Serializer()
        try serializer.serialize(server)
        self.serverCertificate = try NIOSSLCertificate(bytes: serializer.serializedBytes, format: .der)
        self.serverPrivateKey = try NIOSSLPrivateKey(bytes: Array(serverKey.derRepresentation), format: .der)
    }

    /// DNS names and IP addresses the server certificate is valid for.
    private static func subjectAlternativeNames(host: String) -> [GeneralName] {
        var names: [GeneralName] = [
            .dnsName("localhost"),
            .ipAddress(ASN1OctetString(contentBytes: [127, 0, 0, 1])),
            .ipAddress(ASN1OctetString(contentBytes: [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1])),
        ]
        if let ipv4 = Self.ipv4Bytes(host) {
            if ipv4 != [127, 0, 0, 1] { names.append(.ipAddress(ASN1OctetString(contentBytes: ipv4[...]))) }
        } else if let ipv6 = Self.ipv6Bytes(host) {
            names.append(.ipAddress(ASN1OctetString(contentBytes: ipv6[...])))
        } else if !host.isEmpty, host != "localhost" {
            names.append(.dnsName(host))
        }
        return names
    }

    private static func ipv4Bytes(_ host: String) -> [UInt8]? {
        var address = in_addr()
        guard inet_pton(AF_INET, host, &address) == 1 else { return nil }
        return withUnsafeBytes(of: &address) { Array($0) }
    }

    private static func ipv6Bytes(_ host: String) -> [UInt8]? {
        var address = in6_addr()
        guard inet_pton(AF_INET6, host, &address) == 1 else { return nil }
        return withUnsafeBytes(of: &address) { Array($0) }
    }
}
