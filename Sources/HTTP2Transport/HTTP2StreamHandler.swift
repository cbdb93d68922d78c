package import NIOCore
package import PushCore

/// What a connection tells the pool about itself.
package enum HTTP2ConnectionEvent: Sendable {
    /// The server changed SETTINGS_MAX_CONCURRENT_STREAMS.
    case streamLimitChanged(Int)
    /// A GOAWAY arrived (or stream IDs ran out): the connection takes no new streams.
    case goingAway(errorCode: HTTP2Wire.ErrorCode, reason: String?)
    /// The connection closed; `failure` says why when it never finished its handshake.
    case closed(failure: TransportError?)
}

/// A request that was never written because its connection closed or began draining first
/// (or, for an exchange that says so, one above a GOAWAY's last stream ID); the client retries it
/// on another connection without counting an attempt.
package struct HTTP2StreamNotOpened: Error {
    package var transportError: TransportError

    package init(transportError: TransportError) {
        self.transportError = transportError
    }
}

/// Whoever waits for one stream's outcome: a task's continuation, or a callback that a batch of
/// requests shares (``HTTP2StreamHandler/startStream(requestID:request:deadline:waiter:)``).
/// Resumed exactly once, on the connection's event loop.
package enum HTTP2StreamWaiter<Outcome: Sendable>: Sendable {
    case continuation(CheckedContinuation<Outcome, any Error>)
    case callback(@Sendable (Result<Outcome, any Error>) -> Void)

    package func resume(with result: Result<Outcome, any Error>) {
        switch self {
        case .continuation(let continuation): continuation.resume(with: result)
        case .callback(let answer): answer(result)
        }
    }

    package func resume(throwing error: any Error) { resume(with: .failure(error)) }
}

/// A connection's handler as its pooled connection reaches it, on the event loop: streams
/// started with a waiter each and reset by request ID (APNs' and FCM's handlers).
package protocol HTTP2StreamHandler: AnyObject {
    associatedtype Request: Sendable
    associatedtype Outcome: Sendable

    /// Opens a stream for `request`; `waiter` is called exactly once, on the event loop, with the
    /// answer or an error.
    func startStream(requestID: UInt64, request: Request, deadline: NIODeadline, waiter: HTTP2StreamWaiter<Outcome>)

    /// The caller gave up: reset its stream (its waiter gets a `CancellationError`).
    func cancelStream(requestID: UInt64)
}
