import APNSHTTP2
import FCMHTTP
import Foundation
import KafkaTransport
import Logging
import Metrics
import NIOSSL
import ServiceLifecycle
import SwiftASN1
import WebPushHTTP
import X509

/// The TLS files Herald's clients load once, when they are made: the PostgreSQL client
/// certificate and trust roots (HERALD_POSTGRES_URL's `sslcert` and `sslrootcert`), the Kafka
/// brokers' CA (HERALD_KAFKA_SSL_CA_LOCATION) and the push services' extra trust roots
/// (HERALD_APNS_CA_PATH, HERALD_FCM_CA_PATH, HERALD_WEBPUSH_CA_PATH). Each file's earliest certificate expiry is
/// exported as `herald_tls_certificate_expiry_timestamp_seconds{kind}` (UNIX seconds), read again
/// every `interval`. postgres-nio and librdkafka cannot take a new file up in a running client,
/// so when a file's content changes this service returns and the service group stops gracefully
/// (a graceful stop repeats nothing); the orchestrator starts Herald again, with the new file
/// (Kubernetes restarts the container, compose's `restart:` policy the service).
struct CertificateWatch: Service {
    /// One watched file: what it is (the gauge's `kind`) and where.
    struct File: Sendable {
        var kind: String
        var path: String
    }

    let files: [File]
    let interval: Duration
    let metricsFactory: any MetricsFactory
    let logger: Logger

    /// The files of `configuration` to watch; empty when it names none.
    static func files(of configuration: HeraldConfiguration) -> [File] {
        [
            configuration.postgresURL.sslClientCertificatePath.map { File(kind: "postgres_client", path: $0) },
            configuration.postgresURL.sslRootCertificatePath.map { File(kind: "postgres_ca", path: $0) },
            configuration.kafka.properties["ssl.ca.location"].map { File(kind: "kafka_ca", path: $0) },
            configuration.apns?.additionalTrustRootsPEMPath.map { File(kind: "apns_ca", path: $0) },
            configuration.fcm?.additionalTrustRootsPEMPath.map { File(kind: "fcm_ca", path: $0) },
            configuration.webPush?.additionalTrustRootsPEMPath.map { File(kind: "webpush_ca", path: $0) },
        ].compactMap(\.self)
    }

    func run() async throws {
        let gauges = files.map { Gauge(label: "herald_tls_certificate_expiry_timestamp_seconds", dimensions: [("kind", $0.kind)], factory: metricsFactory) }
        let atStart = read(into: gauges)
        await cancelWhenGracefulShutdown {
            var contents = atStart
            while (try? await Task.sleep(for: interval)) != nil {
                let now = read(into: gauges)
                for (index, file) in files.enumerated() {
                    guard let before = contents[index], let after = now[index], before != after else { continue }
                    logger.notice(
                        "a TLS file changed on disk: stopping gracefully, to start again with it",
                        metadata: ["herald.certificate.kind": "\(file.kind)", "herald.certificate.path": "\(file.path)"]
                    )
                    return
                }
                contents = now
            }
        }
    }

    /// Each file's bytes (nil when it cannot be read: a rotation in progress changes nothing
    /// yet), with its earliest expiry recorded in its gauge.
    private func read(into gauges: [Gauge]) -> [[UInt8]?] {
        files.enumerated().map { index, file in
            guard let bytes = FileManager.default.contents(atPath: file.path).map(Array.init) else {
                logger.warning("cannot read a TLS file", metadata: ["herald.certificate.kind": "\(file.kind)", "herald.certificate.path": "\(file.path)"])
                return nil
            }
            if let expiry = Self.earliestExpiry(pem: bytes) {
                gauges[index].record(expiry)
            }
            return bytes
        }
    }

    /// The earliest `notValidAfter` of the PEM certificates in `pem`, in whole seconds since 1970
    /// (X.509 times are whole seconds: the `Date` holds them exactly).
    static func earliestExpiry(pem: [UInt8]) -> Int64? {
        guard let certificates = try? NIOSSLCertificate.fromPEMBytes(pem) else { return nil }
        return certificates.compactMap { certificate -> Int64? in
            guard let der = try? certificate.toDERBytes(), let parsed = try? Certificate(derEncoded: der) else { return nil }
            return Int64(parsed.notValidAfter.timeIntervalSince1970.rounded(.down))
        }.min()
    }
}
