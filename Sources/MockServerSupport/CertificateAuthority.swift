public import Crypto
public import Foundation
import SwiftASN1
public import X509

/// A throw-away P-256 certificate authority: it issues the mock's server certificate, and the
/// client certificates of tests that exercise certificate authentication.
public struct CertificateAuthority: Sendable {
    /// The authority's own (self-signed) certificate; clients or servers trust it.
    public let certificate: Certificate
    private let key: P256.Signing.PrivateKey
    private let notValidBefore: Date
    private let notValidAfter: Date

    /// A new authority named `commonName`, valid from an hour ago (for clients with a slightly
    /// slow clock) for `validity` seconds.
    public init(commonName: String, validity: TimeInterval = 60 * 60 * 24 * 365) throws {
        key = P256.Signing.PrivateKey()
        notValidBefore = Date().addingTimeInterval(-60 * 60)
        notValidAfter = notValidBefore.addingTimeInterval(validity)
        let name = try DistinguishedName {
            OrganizationName("Herald")
            CommonName(commonName)
        }
        let publicKey = Certificate.PublicKey(key.publicKey)
        certificate = try Certificate(
            version: .v3,
            serialNumber: Certificate.SerialNumber(),
            publicKey: publicKey,
            notValidBefore: notValidBefore,
            notValidAfter: notValidAfter,
            issuer: name,
            subject: name,
            signatureAlgorithm: .ecdsaWithSHA256,
            extensions: try Certificate.Extensions {
                Critical(BasicConstraints.isCertificateAuthority(maxPathLength: 0))
                Critical(KeyUsage(keyCertSign: true, cRLSign: true))
                SubjectKeyIdentifier(hash: publicKey)
            },
            issuerPrivateKey: Certificate.PrivateKey(key)
        )
    }

    /// The authority's certificate as PEM.
    public var pem: String {
        get throws { try certificate.serializeAsPEM().pemString }
    }

    /// Issues a certificate for `commonName` with a new key, for `usage` (server or client
    /// authentication), valid for `alternativeNames` when given.
    public func issue(
        commonName: String,
        usage: ExtendedKeyUsage.Usage,
        alternativeNames: [GeneralName] = []
    ) throws -> (certificate: Certificate, privateKey: P256.Signing.PrivateKey) {
        let leafKey = P256.Signing.PrivateKey()
        let leafPublicKey = Certificate.PublicKey(leafKey.publicKey)
        let leaf = try Certificate(
            version: .v3,
            serialNumber: Certificate.SerialNumber(),
            publicKey: leafPublicKey,
            notValidBefore: notValidBefore,
            notValidAfter: notValidAfter,
            issuer: certificate.subject,
            subject: try DistinguishedName {
                OrganizationName("Herald")
                CommonName(commonName)
            },
            signatureAlgorithm: .ecdsaWithSHA256,
            extensions: try Certificate.Extensions {
                Critical(BasicConstraints.notCertificateAuthority)
                Critical(KeyUsage(digitalSignature: true))
                try ExtendedKeyUsage([usage])
                if !alternativeNames.isEmpty { SubjectAlternativeNames(alternativeNames) }
                SubjectKeyIdentifier(hash: leafPublicKey)
                AuthorityKeyIdentifier(keyIdentifier: SubjectKeyIdentifier(hash: certificate.publicKey).keyIdentifier)
            },
            issuerPrivateKey: Certificate.PrivateKey(key)
        )
        return (leaf, leafKey)
    }
}
