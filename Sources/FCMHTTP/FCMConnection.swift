import Logging
import NIOCore
import NIOPosix
import NIOSSL
import Synchronization
import HTTP2TLS
import HTTP2Transport

/// One HTTP/2 connection to FCM: a `Sendable` face for the loop-bound ``FCMConnectionHandler``
/// (the transport's frame code), pooled by ``FCMHTTP2Transport``; its streams start as
/// every platform's do (``HTTP2StreamConnection``).
final class FCMConnection: HTTP2StreamConnection {
    let id: Int
    private let channel: any Channel
    let handler: NIOLoopBound<FCMConnectionHandler>
    private let requestIDs = Atomic<UInt64>(0)

    /// FCM's client has one endpoint.
    var endpoint: HTTP2SoleEndpoint { .sole }

    private init(id: Int, channel: any Channel, handler: NIOLoopBound<FCMConnectionHandler>) {
        self.id = id
        self.channel = channel
        self.handler = handler
    }

    /// Everything needed to open connections to FCM; built once per client.
    struct Factory: Sendable {
        var connector: HTTP2TLSConnector
        var endpoint: HTTP2ServerAddress
        var maximumAnswerBytes: Int

        /// Connects, completes TLS (ALPN h2) and waits for the server's first SETTINGS frame.
        /// Returns the connection and the server's stream limit.
        func connect(
            id: Int,
            logger: Logger,
            onEvent: @escaping @Sendable (HTTP2ConnectionEvent) -> Void
        ) async throws -> (FCMConnection, streamLimit: Int) {
            let maximumAnswerBytes = self.maximumAnswerBytes
            let (channel, handler, streamLimit) = try await connector.connect(to: endpoint) { configuration, ready in
                FCMConnectionHandler(
                    configuration: configuration,
                    maximumAnswerBytes: maximumAnswerBytes,
                    readyPromise: ready,
                    logger: logger,
                    onEvent: onEvent
                )
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
