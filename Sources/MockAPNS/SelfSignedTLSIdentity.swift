import Crypto
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

/// A throw-away ``CertificateAuthority`` and a server certificate it issued, made at start-up.
///
/// Clients trust ``certificateAuthorityPEM``; the server presents ``serverCertificate``, whose
/// subject alternative names cover `localhost`, `127.0.0.1`, `::1` and the configured host.
struct SelfSignedTLSIdentity {
    let certificateAuthorityPEM: String
    let serverCertificate: NIOSSLCertificate
    let serverPrivateKey: NIOSSLPrivateKey

    init(host: String) throws {
        let authority = try CertificateAuthority(commonName: "Herald Mock APNs CA")
        let server = try authority.issue(
            commonName: "localhost",
            usage: .serverAuth,
            alternativeNames: Self.subjectAlternativeNames(host: host)
        )
        self.certificateAuthorityPEM = try authority.pem
        var serializer = DER.Serializer()
        try serializer.serialize(server.certificate)
        self.serverCertificate = try NIOSSLCertificate(bytes: serializer.serializedBytes, format: .der)
        self.serverPrivateKey = try NIOSSLPrivateKey(bytes: Array(server.privateKey.derRepresentation), format: .der)
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
