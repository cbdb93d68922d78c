package import Logging
package import NIOCore

/// The channel handler of one HTTP/2 connection whose requests are all one exchange's:
/// ``HTTP2ConnectionCore`` behind NIO's handler interface. APNs', FCM's and web push's
/// connections differ only in their exchange; their clients reach it through `NIOLoopBound`.
package final class HTTP2ExchangeHandler<Exchange: HTTP2Exchange>: ChannelInboundHandler, HTTP2StreamHandler
where Exchange.Request: Sendable {
    package typealias InboundIn = ByteBuffer
    package typealias OutboundOut = ByteBuffer

    private let core: HTTP2ConnectionCore<Exchange>

    /// `readyPromise` is fulfilled with the server's stream limit once the handshake finished.
    package init(
        configuration: HTTP2ConnectionConfiguration,
        exchange: Exchange,
        readyPromise: EventLoopPromise<Int>,
        logger: Logger,
        onEvent: @escaping @Sendable (HTTP2ConnectionEvent) -> Void
    ) {
        core = HTTP2ConnectionCore(configuration: configuration, exchange: exchange, readyPromise: readyPromise, logger: logger, onEvent: onEvent)
    }

    /// Opens a stream for `request`; `waiter` is called exactly once, on the event loop, with
    /// the answer or an error (``HTTP2StreamNotOpened`` when it was never written).
    package func startStream(requestID: UInt64, request: Exchange.Request, deadline: NIODeadline, waiter: HTTP2StreamWaiter<Exchange.Outcome>) {
        core.startStream(requestID: requestID, request: request, deadline: deadline, waiter: waiter)
    }

    /// The caller's task was cancelled: reset its stream.
    package func cancelStream(requestID: UInt64) {
        core.cancelStream(requestID: requestID)
    }

    /// Changes the exchange for streams opened from now on (APNs: a new provider token).
    package func updateExchange(_ update: (inout Exchange) -> Void) {
        core.updateExchange(update)
    }

    /// Stops taking streams and closes once in-flight streams finished or `timeout` passed.
    package func closeGracefully(within timeout: TimeAmount) {
        core.closeGracefully(within: timeout)
    }

    package func handlerAdded(context: ChannelHandlerContext) { core.handlerAdded(context: context) }
    package func handlerRemoved(context: ChannelHandlerContext) { core.handlerRemoved(context: context) }
    package func channelActive(context: ChannelHandlerContext) { core.channelActive(context: context) }
    package func channelRead(context: ChannelHandlerContext, data: NIOAny) { core.channelRead(unwrapInboundIn(data)) }
    package func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        core.userInboundEventTriggered(context: context, event: event)
    }
    package func errorCaught(context: ChannelHandlerContext, error: any Error) { core.errorCaught(context: context, error: error) }
    package func channelInactive(context: ChannelHandlerContext) { core.channelInactive(context: context) }
}
