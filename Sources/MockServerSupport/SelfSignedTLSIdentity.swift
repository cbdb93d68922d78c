import Crypto
import Foundation
package import NIOSSL
import SwiftASN1
import X509

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// A throw-away ``CertificateAuthority`` and a server certificate it issued, made when a mock
/// server starts.
///
/// Clients trust ``certificateAuthorityPEM``; the server presents ``serverCertificate``, whose
/// subject alternative names cover `localhost`, `127.0.0.1`, `::1` and the configured host.
package struct SelfSignedTLSIdentity {
    package let certificateAuthorityPEM: String
    package let serverCertificate: NIOSSLCertificate
    package let serverPrivateKey: NIOSSLPrivateKey

    /// A new authority named `authorityName` and a certificate it issued for `host`.
    package init(authorityName: String, host: String) throws {
        let authority = try CertificateAuthority(commonName: authorityName)
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

    /// TLS 1.2 or later, ALPN `h2`, presenting the server certificate.
    package var serverConfiguration: TLSConfiguration {
        var configuration = TLSConfiguration.makeServerConfiguration(
            certificateChain: [.certificate(serverCertificate)],
            privateKey: .privateKey(serverPrivateKey)
        )
        configuration.applicationProtocols = ["h2"]
        configuration.minimumTLSVersion = .tlsv12
        return configuration
    }

    /// Writes the authority's PEM to `path` (its folder made when missing), for clients to trust.
    package func writeCertificateAuthority(to path: String) throws {
        let url = URL(fileURLWithPath: path)
        try FileManager.default.createDirectory(at: url.deletingLastPathComponent(), withIntermediateDirectories: true)
        try Data(certificateAuthorityPEM.utf8).write(to: url, options: .atomic)
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
