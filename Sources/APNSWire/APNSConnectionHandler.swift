package import APNSCore
package import Logging
package import NIOCore
package import HTTP2Transport

/// APNs' answer on one stream and the provider token the request carried.
package struct APNSStreamOutcome: Sendable {
    package var response: APNSResponse
    package var providerToken: String?
}

/// An APNs stream's waiter.
package typealias StreamWaiter = HTTP2StreamWaiter<APNSStreamOutcome>

/// The HTTP/2 client of one APNs connection: ``HTTP2ConnectionCore`` with ``APNSExchange``
/// (``APNSHeaderEncoder``'s header blocks, the connection's provider token, answers read as
/// ``APNSStreamOutcome``). ``APNSConnection`` reaches it through `NIOLoopBound`.
package final class APNSConnectionHandler: ChannelInboundHandler, HTTP2StreamHandler {
    package typealias InboundIn = ByteBuffer
    package typealias OutboundOut = ByteBuffer
    package typealias Configuration = HTTP2ConnectionConfiguration
    /// The connection's protocol state (tests drive it directly).
    typealias StateMachine<Waiter> = HTTP2ConnectionCore<APNSExchange>.StateMachine<Waiter>

    /// The stream limit assumed when the server's SETTINGS name none (RFC 9113: unlimited).
    package static var streamLimitWhenUnlimited: Int { StateMachine<StreamWaiter>.streamLimitWhenUnlimited }

    private let core: HTTP2ConnectionCore<APNSExchange>

    package init(
        configuration: Configuration,
        providerToken: String?,
        readyPromise: EventLoopPromise<Int>,
        logger: Logger,
        onEvent: @escaping @Sendable (HTTP2ConnectionEvent) -> Void
    ) {
        core = HTTP2ConnectionCore(
            configuration: configuration,
            exchange: APNSExchange(authority: configuration.authority, providerToken: providerToken),
            readyPromise: readyPromise,
            logger: logger,
            onEvent: onEvent
        )
    }

    // MARK: Calls from APNSConnection (on the event loop)

    /// Opens a stream for `request`; `continuation` is resumed exactly once with the answer or an error.
    package func startStream(
        requestID: UInt64,
        request: APNSRequest,
        deadline: NIODeadline,
        continuation: CheckedContinuation<APNSStreamOutcome, any Error>
    ) {
        core.startStream(requestID: requestID, request: request, deadline: deadline, waiter: .continuation(continuation))
    }

    /// Opens a stream for `request`; `waiter` is called exactly once, on the event loop, with the
    /// answer or an error.
    package func startStream(requestID: UInt64, request: APNSRequest, deadline: NIODeadline, waiter: StreamWaiter) {
        core.startStream(requestID: requestID, request: request, deadline: deadline, waiter: waiter)
    }

    /// The caller's task was cancelled: reset its stream.
    package func cancelStream(requestID: UInt64) {
        core.cancelStream(requestID: requestID)
    }

    /// Uses `token` for the `authorization` header of streams opened from now on.
    package func installProviderToken(_ token: String) {
        core.updateExchange { $0.installProviderToken(token) }
    }

    /// Stops taking streams and closes once in-flight streams finished or `timeout` passed.
    package func closeGracefully(within timeout: TimeAmount) {
        core.closeGracefully(within: timeout)
    }

    // MARK: ChannelHandler

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
