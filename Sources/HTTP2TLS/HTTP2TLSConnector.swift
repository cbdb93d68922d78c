package import HTTP2Transport
package import NIOCore
import NIOPosix
package import NIOSSL

/// Opens the TLS connections every platform's HTTP/2 client runs on: connects, completes TLS
/// (ALPN h2) in front of the platform's connection handler, and waits for the server's first
/// SETTINGS frame. A module apart from ``HTTP2ConnectionCore``'s so the fuzz target builds
/// without swift-nio-ssl.
package struct HTTP2TLSConnector: Sendable {
    package var eventLoopGroup: any EventLoopGroup
    package var sslContext: NIOSSLContext
    package var connectTimeout: Duration
    package var pingInterval: Duration
    package var pingTimeout: Duration

    package init(eventLoopGroup: any EventLoopGroup, sslContext: NIOSSLContext, connectTimeout: Duration, pingInterval: Duration, pingTimeout: Duration) {
        self.eventLoopGroup = eventLoopGroup
        self.sslContext = sslContext
        self.connectTimeout = connectTimeout
        self.pingInterval = pingInterval
        self.pingTimeout = pingTimeout
    }

    /// Connects to `address` with the handler `makeHandler` builds on the channel's event loop
    /// (from the connection's settings and the promise it fulfils with the server's stream limit
    /// once the handshake finished); returns the channel, its handler and that stream limit.
    /// Cancellation or a failed handshake closes the channel.
    package func connect<Handler: ChannelInboundHandler & SendableMetatype>(
        to address: HTTP2ServerAddress,
        makeHandler: @escaping @Sendable (HTTP2ConnectionConfiguration, EventLoopPromise<Int>) -> Handler
    ) async throws -> (channel: any Channel, handler: NIOLoopBound<Handler>, streamLimit: Int) {
        let configuration = HTTP2ConnectionConfiguration(
            authority: address.authority,
            handshakeTimeout: TimeAmount(connectTimeout),
            pingInterval: TimeAmount(pingInterval),
            pingTimeout: TimeAmount(pingTimeout),
            isTLSFailure: { $0 is NIOSSLError || $0 is BoringSSLError }
        )
        let sniHostname = address.isIPAddress ? nil : address.host
        let sslContext = self.sslContext
        let (channel, handler, ready) = try await ClientBootstrap(group: eventLoopGroup)
            .connectTimeout(TimeAmount(connectTimeout))
            // TCP_NODELAY is ClientBootstrap's default. Not `.socketOption(.tcp_nodelay)`: at
            // SOL_SOCKET that number is SO_DEBUG, refused without CAP_NET_ADMIN, so every
            // connect failed in a container (scripts/check-containers.sh found it).
            .connect(host: address.host, port: address.port) { channel in
                channel.eventLoop.makeCompletedFuture {
                    let ready = channel.eventLoop.makePromise(of: Int.self)
                    let handler = makeHandler(configuration, ready)
                    let pipeline = channel.pipeline.syncOperations
                    try pipeline.addHandler(NIOSSLClientHandler(context: sslContext, serverHostname: sniHostname))
                    try pipeline.addHandler(handler)
                    return (channel, NIOLoopBound(handler, eventLoop: channel.eventLoop), ready.futureResult)
                }
            }
        do {
            let streamLimit = try await withTaskCancellationHandler {
                try await ready.get()
            } onCancel: {
                channel.close(promise: nil)
            }
            return (channel, handler, streamLimit)
        } catch {
            channel.close(promise: nil)
            throw error
        }
    }
}
