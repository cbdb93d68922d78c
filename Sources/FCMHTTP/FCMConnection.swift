import APNSCore
import APNSHTTP2
import APNSWire
import Logging
import NIOCore
import NIOPosix
import NIOSSL
import Synchronization

/// One HTTP/2 connection to FCM: a `Sendable` face for the loop-bound ``FCMConnectionHandler``
/// (the frame code APNs' connections use), pooled by ``FCMHTTP2Transport``; its streams start as
/// APNs' do (``HTTP2StreamConnection``).
final class FCMConnection: HTTP2StreamConnection {
    let id: Int
    private let channel: any Channel
    let handler: NIOLoopBound<FCMConnectionHandler>
    private let requestIDs = Atomic<UInt64>(0)

    /// The pool keeps FCM's connections as those of one environment.
    var environment: APNSEnvironment { .production }

    private init(id: Int, channel: any Channel, handler: NIOLoopBound<FCMConnectionHandler>) {
        self.id = id
        self.channel = channel
        self.handler = handler
    }

    /// Everything needed to open connections to FCM; built once per client.
    struct Factory: Sendable {
        var eventLoopGroup: any EventLoopGroup
        var sslContext: NIOSSLContext
        var endpoint: APNSClientConfiguration.Endpoint
        var connectTimeout: Duration
        var pingInterval: Duration
        var pingTimeout: Duration
        var maximumAnswerBytes: Int

        /// Connects, completes TLS (ALPN h2) and waits for the server's first SETTINGS frame.
        /// Returns the connection and the server's stream limit.
        func connect(
            id: Int,
            logger: Logger,
            onEvent: @escaping @Sendable (APNSConnectionEvent) -> Void
        ) async throws -> (FCMConnection, streamLimit: Int) {
            let configuration = HTTP2ConnectionConfiguration(
                authority: endpoint.authority,
                handshakeTimeout: TimeAmount(connectTimeout),
                pingInterval: TimeAmount(pingInterval),
                pingTimeout: TimeAmount(pingTimeout),
                isTLSFailure: { $0 is NIOSSLError || $0 is BoringSSLError }
            )
            let sniHostname = endpoint.isIPAddress ? nil : endpoint.host
            let (sslContext, maximumAnswerBytes) = (self.sslContext, self.maximumAnswerBytes)
            // TCP_NODELAY is ClientBootstrap's default (see APNSConnection).
            let (channel, handler, ready) = try await ClientBootstrap(group: eventLoopGroup)
                .connectTimeout(TimeAmount(connectTimeout))
                .connect(host: endpoint.host, port: endpoint.port) { channel in
                    channel.eventLoop.makeCompletedFuture {
                        let ready = channel.eventLoop.makePromise(of: Int.self)
                        let handler = FCMConnectionHandler(
                            configuration: configuration,
                            maximumAnswerBytes: maximumAnswerBytes,
                            readyPromise: ready,
                            logger: logger,
                            onEvent: onEvent
                        )
                        let pipeline = channel.pipeline.syncOperations
                        try pipeline.addHandler(NIOSSLClientHandler(context: sslContext, serverHostname: sniHostname))
                        try pipeline.addHandler(handler)
                        return (channel, NIOLoopBound(handler, eventLoop: channel.eventLoop), ready.futureResult)
                    }
                }
            let streamLimit: Int
            do {
                streamLimit = try await withTaskCancellationHandler {
                    try await ready.get()
                } onCancel: {
                    channel.close(promise: nil)
                }
            } catch {
                channel.close(promise: nil)
                throw error
            }
            return (FCMConnection(id: id, channel: channel, handler: handler), streamLimit)
        }
    }

    /// A new ID for a stream of this connection.
    func nextRequestID() -> UInt64 {
        requestIDs.wrappingAdd(1, ordering: .relaxed).newValue
    }

    /// Takes no new streams and closes when in-flight streams finished, at the latest after `timeout`.
    func closeGracefully(within timeout: Duration) {
        let handler = self.handler
        channel.eventLoop.execute { handler.value.closeGracefully(within: TimeAmount(timeout)) }
    }

    /// Closes at once; in-flight streams fail with a connection error.
    func close() {
        channel.close(promise: nil)
    }

    /// Runs until the channel closes (cancellation closes it).
    func runUntilClosed() async {
        let channel = self.channel
        await withTaskCancellationHandler {
            try? await channel.closeFuture.get()
        } onCancel: {
            channel.close(promise: nil)
        }
    }
}
