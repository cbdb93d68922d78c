// WebPushHTTP2Transport.swift: the web push client's HTTP/2 connections on the shared transport,
// one pool state machine keyed by push-service origin.

import Logging
import WebPushCore
import Metrics
import NIOCore
import NIOSSL
import HTTP2TLS
import HTTP2Transport

/// Web Push's HTTP/2 connections: the shared transport (``HTTP2ExchangeTransport``) with
/// ``WebPushExchange`` and an endpoint per push-service origin, as FCM's has its one endpoint
/// and APNs' its environments. The pool state machine makes an origin's pool the first time a
/// request names it, so origins need not be known up front; each has up to
/// ``WebPushClientConfiguration/connectionsPerOrigin`` connections.
typealias WebPushHTTP2Transport = HTTP2ExchangeTransport<WebPushExchange, WebPushOrigin>

/// One HTTP/2 connection to one push service origin.
typealias WebPushConnection = WebPushHTTP2Transport.Connection

extension WebPushHTTPClient {
    /// The transport for `configuration`; throws NIOSSL's error when the trust roots cannot be read.
    static func makeTransport(
        configuration: WebPushClientConfiguration,
        eventLoopGroup: any EventLoopGroup,
        countingGoAwaysIn goAways: Counter,
        logger: Logger
    ) throws -> WebPushHTTP2Transport {
        var tls = TLSConfiguration.makeClientConfiguration()
        tls.applicationProtocols = ["h2"]
        if let path = configuration.additionalTrustRootsPEMPath {
            tls.additionalTrustRoots = [.certificates(try NIOSSLCertificate.fromPEMFile(path))]
        }
        let maximumAnswerBytes = configuration.maximumResponseBytes
        return WebPushHTTP2Transport(
            connector: HTTP2TLSConnector(
                eventLoopGroup: eventLoopGroup,
                sslContext: try NIOSSLContext(configuration: tls),
                connectTimeout: configuration.connectTimeout,
                pingInterval: configuration.pingInterval,
                pingTimeout: configuration.pingTimeout
            ),
            peer: WebPushHTTP2Transport.Peer(
                address: { $0.address },
                exchange: { _, _ in WebPushExchange(maximumAnswerBytes: maximumAnswerBytes) },
                status: { $0.status },
                goAwayReceived: { goAways.increment() }
            ),
            connectionsPerEndpoint: configuration.connectionsPerOrigin,
            maximumWaiters: configuration.maximumQueuedRequests,
            shutdownGracePeriod: configuration.shutdownGracePeriod,
            logger: logger
        )
    }
}
