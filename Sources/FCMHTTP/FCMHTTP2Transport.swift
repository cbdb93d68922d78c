import Logging
import Foundation
import Metrics
import NIOCore
import NIOSSL
import HTTP2TLS
import HTTP2Transport

/// FCM's HTTP/2 connections: the shared transport (``HTTP2ExchangeTransport``) with
/// ``FCMExchange`` and one endpoint.
///
/// Hand-written only as far as a measurement justified it: `herald-bench fcm-sender` found
/// AsyncHTTPClient to be most of the sender's CPU per request, far above h2load's whole cost on
/// the same mock, while APNs' sender over this frame code stays within a small multiple of
/// h2load's (BENCHMARKS.md, "The FCM sender"). Nothing new was written for the wire but FCM's
/// header block and answer (``FCMExchange``); BENCHMARKS.md, "FCM over Herald's own HTTP/2
/// client", has what it bought.
typealias FCMHTTP2Transport = HTTP2ExchangeTransport<FCMExchange, HTTP2SoleEndpoint>

/// One HTTP/2 connection to FCM.
typealias FCMConnection = FCMHTTP2Transport.Connection

extension FCMHTTPClient {
    /// FCM's transport for `configuration`, and the path every send's path starts with (the
    /// base URL's own path, if any). Throws when the base URL is not `https://host[:port][/path]`,
    /// and NIOSSL's error when the trust roots cannot be read.
    static func makeTransport(
        configuration: FCMClientConfiguration,
        eventLoopGroup: any EventLoopGroup,
        countingGoAwaysIn goAways: Counter,
        logger: Logger
    ) throws -> (transport: FCMHTTP2Transport, pathPrefix: String) {
        guard let url = URL(string: configuration.baseURL), url.scheme == "https", let host = url.host, !host.isEmpty else {
            throw FCMConfigurationError("the FCM base URL must be https://host[:port][/path]")
        }
        var tls = TLSConfiguration.makeClientConfiguration()
        tls.applicationProtocols = ["h2"]
        if let path = configuration.additionalTrustRootsPEMPath {
            tls.additionalTrustRoots = [.certificates(try NIOSSLCertificate.fromPEMFile(path))]
        }
        let hostWithoutBrackets = host.hasPrefix("[") && host.hasSuffix("]") ? String(host.dropFirst().dropLast()) : host
        let address = HTTP2ServerAddress(host: hostWithoutBrackets, port: url.port ?? 443)
        let maximumAnswerBytes = configuration.maximumResponseBytes
        let transport = FCMHTTP2Transport(
            connector: HTTP2TLSConnector(
                eventLoopGroup: eventLoopGroup,
                sslContext: try NIOSSLContext(configuration: tls),
                connectTimeout: configuration.connectTimeout,
                pingInterval: configuration.pingInterval,
                pingTimeout: configuration.pingTimeout
            ),
            peer: FCMHTTP2Transport.Peer(
                address: { _ in address },
                exchange: { _, connection in FCMExchange(authority: connection.authority, maximumAnswerBytes: maximumAnswerBytes) },
                status: { $0.status },
                goAwayReceived: { goAways.increment() }
            ),
            connectionsPerEndpoint: configuration.connections,
            maximumWaiters: configuration.maximumQueuedRequests,
            shutdownGracePeriod: configuration.shutdownGracePeriod,
            logger: logger
        )
        return (transport, url.path == "/" ? "" : url.path)
    }
}
