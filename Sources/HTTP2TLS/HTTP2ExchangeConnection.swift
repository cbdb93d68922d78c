package import HTTP2Transport
package import Logging
package import NIOCore
import Synchronization

/// One pooled HTTP/2 + TLS connection carrying one exchange's requests to one of its client's
/// endpoints: a `Sendable` face for the loop-bound ``HTTP2ExchangeHandler``. FCM's and web
/// push's connections are this; their streams start as every platform's do
/// (``HTTP2StreamConnection``).
package final class HTTP2ExchangeConnection<Exchange: HTTP2Exchange, Endpoint: Hashable & Sendable>: HTTP2StreamConnection
where Exchange.Request: Sendable, Exchange: SendableMetatype {
    package let id: Int
    package let endpoint: Endpoint
    package let handler: NIOLoopBound<HTTP2ExchangeHandler<Exchange>>
    private let channel: any Channel
    private let requestIDs = Atomic<UInt64>(0)

    private init(id: Int, endpoint: Endpoint, channel: any Channel, handler: NIOLoopBound<HTTP2ExchangeHandler<Exchange>>) {
        self.id = id
        self.endpoint = endpoint
        self.channel = channel
        self.handler = handler
    }

    /// Connects to `address` through `connector`, completes TLS (ALPN h2) and waits for the
    /// server's first SETTINGS frame; `exchange` makes the connection's exchange from its
    /// configuration (its `:authority`). Returns the connection and the server's stream limit.
    package static func connect(
        id: Int,
        endpoint: Endpoint,
        address: HTTP2ServerAddress,
        connector: HTTP2TLSConnector,
        logger: Logger,
        onEvent: @escaping @Sendable (HTTP2ConnectionEvent) -> Void,
        exchange: @escaping @Sendable (HTTP2ConnectionConfiguration) -> Exchange
    ) async throws -> (HTTP2ExchangeConnection, streamLimit: Int) {
        let (channel, handler, streamLimit) = try await connector.connect(to: address) { configuration, ready in
            HTTP2ExchangeHandler(configuration: configuration, exchange: exchange(configuration), readyPromise: ready, logger: logger, onEvent: onEvent)
        }
        return (HTTP2ExchangeConnection(id: id, endpoint: endpoint, channel: channel, handler: handler), streamLimit)
    }

    /// A new ID for a stream of this connection.
    package func nextRequestID() -> UInt64 {
        requestIDs.wrappingAdd(1, ordering: .relaxed).newValue
    }

    /// Takes no new streams and closes when in-flight streams finished, at the latest after `timeout`.
    package func closeGracefully(within timeout: Duration) {
        let handler = self.handler
        channel.eventLoop.execute { handler.value.closeGracefully(within: TimeAmount(timeout)) }
    }

    /// Closes at once; in-flight streams fail with a connection error.
    package func close() {
        channel.close(promise: nil)
    }

    /// Runs until the channel closes (cancellation closes it).
    package func runUntilClosed() async {
        let channel = self.channel
        await withTaskCancellationHandler {
            try? await channel.closeFuture.get()
        } onCancel: {
            channel.close(promise: nil)
        }
    }
}
