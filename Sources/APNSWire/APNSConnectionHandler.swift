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

/// The HTTP/2 client of one APNs connection: the shared ``HTTP2ExchangeHandler`` with
/// ``APNSExchange`` (``APNSHeaderEncoder``'s header blocks, the connection's provider token,
/// answers read as ``APNSStreamOutcome``). ``APNSConnection`` reaches it through `NIOLoopBound`.
package typealias APNSConnectionHandler = HTTP2ExchangeHandler<APNSExchange>

extension HTTP2ExchangeHandler where Exchange == APNSExchange {
    package typealias Configuration = HTTP2ConnectionConfiguration
    /// The connection's protocol state (tests drive it directly).
    typealias StateMachine<Waiter> = HTTP2ConnectionCore<APNSExchange>.StateMachine<Waiter>

    /// The stream limit assumed when the server's SETTINGS name none (RFC 9113: unlimited).
    package static var streamLimitWhenUnlimited: Int { StateMachine<StreamWaiter>.streamLimitWhenUnlimited }

    /// A connection's handler that sends `providerToken` (nil: certificate authentication).
    package convenience init(
        configuration: Configuration,
        providerToken: String?,
        readyPromise: EventLoopPromise<Int>,
        logger: Logger,
        onEvent: @escaping @Sendable (HTTP2ConnectionEvent) -> Void
    ) {
        self.init(
            configuration: configuration,
            exchange: APNSExchange(authority: configuration.authority, providerToken: providerToken),
            readyPromise: readyPromise,
            logger: logger,
            onEvent: onEvent
        )
    }

    /// Opens a stream for `request`; `continuation` is resumed exactly once with the answer or an error.
    package func startStream(
        requestID: UInt64,
        request: APNSRequest,
        deadline: NIODeadline,
        continuation: CheckedContinuation<APNSStreamOutcome, any Error>
    ) {
        startStream(requestID: requestID, request: request, deadline: deadline, waiter: .continuation(continuation))
    }

    /// Uses `token` for the `authorization` header of streams opened from now on.
    package func installProviderToken(_ token: String) {
        updateExchange { $0.installProviderToken(token) }
    }
}
