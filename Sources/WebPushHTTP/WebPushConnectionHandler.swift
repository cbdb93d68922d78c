// WebPushConnectionHandler.swift: the channel handler of one connection to a push service's
// origin, `HTTP2ConnectionCore` over `WebPushExchange`.

package import Logging
package import NIOCore
package import WebPushCore
package import HTTP2Transport

/// The HTTP/2 client of one connection to a push service: ``HTTP2ConnectionCore`` with
/// ``WebPushExchange``, the same frame code as APNs' and FCM's connections. The web push client
/// reaches it through `NIOLoopBound`.
package final class WebPushConnectionHandler: ChannelInboundHandler, HTTP2StreamHandler {
    package typealias InboundIn = ByteBuffer
    package typealias OutboundOut = ByteBuffer

    private let core: HTTP2ConnectionCore<WebPushExchange>

    /// `readyPromise` is fulfilled with the server's stream limit once the handshake finished;
    /// answers longer than `maximumAnswerBytes` are read as having no body.
    package init(
        configuration: HTTP2ConnectionConfiguration,
        maximumAnswerBytes: Int,
        readyPromise: EventLoopPromise<Int>,
        logger: Logger,
        onEvent: @escaping @Sendable (HTTP2ConnectionEvent) -> Void
    ) {
        core = HTTP2ConnectionCore(
            configuration: configuration,
            exchange: WebPushExchange(maximumAnswerBytes: maximumAnswerBytes),
            readyPromise: readyPromise,
            logger: logger,
            onEvent: onEvent
        )
    }

    /// Opens a stream for `request`; `waiter` is called exactly once, on the event loop, with
    /// the answer or an error (``HTTP2StreamNotOpened`` when it was never written).
    package func startStream(
        requestID: UInt64,
        request: WebPushSendRequest,
        deadline: NIODeadline,
        waiter: HTTP2StreamWaiter<WebPushResponse>
    ) {
        core.startStream(requestID: requestID, request: request, deadline: deadline, waiter: waiter)
    }

    /// The caller's task was cancelled: reset its stream.
    package func cancelStream(requestID: UInt64) {
        core.cancelStream(requestID: requestID)
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
