import APNSHTTP2
import Foundation
import NIOSSL
import SwiftASN1
import X509

/// What start-up reports about an APNs client certificate: when it expires, and the topics
/// Apple issued it for (its extension 1.2.840.113635.100.6.3.6: each bundle ID, then the push
/// types it allows).
struct APNSCertificateFacts {
    var notValidAfter: Date
    /// nil when the certificate has no topics extension (a certificate for one app).
    var topics: [String]?

    /// Reads the first certificate of a PEM file or PKCS#12 bundle.
    init(path: String, pem: Bool, password: String?) throws {
        let certificate: NIOSSLCertificate?
        if pem {
            certificate = try NIOSSLCertificate.fromPEMFile(path).first
        } else {
            certificate = try NIOSSLPKCS12Bundle(file: path, passphrase: password.map { Array($0.utf8) } ?? []).certificateChain.first
        }
        guard let der = try certificate?.toDERBytes() else { throw ConfigurationError("no certificate in \(path)") }
        let parsed = try Certificate(derEncoded: der)
        notValidAfter = parsed.notValidAfter
        topics = try parsed.extensions.first { $0.oid == [1, 2, 840, 113635, 100, 6, 3, 6] }.map { try Self.topics(in: $0.value) }
    }

    /// The certificate of `credential`, nil for token authentication.
    init?(_ credential: APNSClientConfiguration.Authentication) throws {
        guard let file = credential.certificateFile else { return nil }
        try self.init(path: file.path, pem: !file.isPKCS12, password: file.password)
    }

    /// ``notValidAfter`` in whole seconds since 1970 (X.509 times are whole seconds).
    var expirySeconds: Int64 { Int64(notValidAfter.timeIntervalSince1970.rounded(.down)) }

    /// The bundle IDs of the topics extension: the UTF8Strings at its sequence's top level.
    static func topics(in value: ArraySlice<UInt8>) throws -> [String] {
        guard case .constructed(let children) = try DER.parse(Array(value)).content else { return [] }
        return children.compactMap { child in
            guard child.identifier == .utf8String, case .primitive(let bytes) = child.content else { return nil }
            return String(decoding: bytes, as: UTF8.self)
        }
    }

    /// What to report: expiry (or soon), and `servedTopics` the certificate was not issued for.
    func problems(named name: String, servedTopics: [String], now: Date = Date()) -> [String] {
        var problems: [String] = []
        let expiry = ISO8601DateFormatter().string(from: notValidAfter)
        if notValidAfter <= now {
            problems.append("\(name) expired at \(expiry): APNs will refuse its connections")
        } else if notValidAfter.timeIntervalSince(now) < 30 * 86_400 {
            problems.append("\(name) expires at \(expiry), in less than 30 days")
        }
        if let topics {
            let missing = servedTopics.filter { !topics.contains($0) }
            if !missing.isEmpty {
                problems.append("\(name) was not issued for \(missing.joined(separator: ", ")) (its topics: \(topics.joined(separator: ", ")))")
            }
        }
        return problems
    }
}
