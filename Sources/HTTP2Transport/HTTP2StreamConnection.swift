package import NIOCore

/// A pooled connection whose streams start on its event loop, through its loop-bound handler:
/// one request from a task (``execute(_:deadline:)``) or a batch's share in one hop
/// (``start(_:deadline:)``). APNs' and FCM's connections are both.
package protocol HTTP2StreamConnection: HTTP2PooledConnection, AnyObject {
    associatedtype Handler: HTTP2StreamHandler

    /// The connection's handler, used on its event loop only.
    var handler: NIOLoopBound<Handler> { get }

    /// A new ID for a stream of this connection.
    func nextRequestID() -> UInt64
}

extension HTTP2StreamConnection {
    /// Whether the caller runs on this connection's event loop: a batch started from there
    /// wakes no other thread, and its answers resume the caller where it is.
    package var isOnCurrentEventLoop: Bool { handler.eventLoop.inEventLoop }

    /// Sends `request` on a new stream and waits for the answer, the deadline or a failure.
    package func execute(_ request: Handler.Request, deadline: NIODeadline) async throws -> Handler.Outcome {
        // An already-cancelled task would run its cancellation handler before the stream exists.
        try Task.checkCancellation()
        let requestID = nextRequestID()
        let handler = self.handler
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { continuation in
                handler.eventLoop.execute {
                    handler.value.startStream(requestID: requestID, request: request, deadline: deadline, waiter: .continuation(continuation))
                }
            }
        } onCancel: {
            handler.eventLoop.execute { handler.value.cancelStream(requestID: requestID) }
        }
    }

    /// Starts a stream for each request in one hop to the event loop; each waiter is called
    /// there with its answer or an error.
    package func start(
        _ streams: [(requestID: UInt64, request: Handler.Request, waiter: HTTP2StreamWaiter<Handler.Outcome>)],
        deadline: NIODeadline
    ) {
        let handler = self.handler
        handler.eventLoop.execute {
            for stream in streams {
                handler.value.startStream(requestID: stream.requestID, request: stream.request, deadline: deadline, waiter: stream.waiter)
            }
        }
    }

    /// Resets the streams of these requests (their waiters get a `CancellationError`).
    package func cancel(_ requestIDs: [UInt64]) {
        let handler = self.handler
        handler.eventLoop.execute {
            for requestID in requestIDs { handler.value.cancelStream(requestID: requestID) }
        }
    }
}

/// Whoever waits in a connection pool for a stream: a task's continuation, or a request of an
/// ``HTTP2StreamBatch``, called back where the stream was freed (no task per request).
package enum PooledStreamWaiter<Connection: Sendable>: Sendable {
    case continuation(CheckedContinuation<Connection, any Error>)
    case callback(@Sendable (Result<Connection, any Error>) -> Void)

    /// Hands the waiter its stream's connection.
    package func resume(returning connection: Connection) {
        switch self {
        case .continuation(let continuation): continuation.resume(returning: connection)
        case .callback(let leased): leased(.success(connection))
        }
    }

    /// Tells the waiter it gets no stream.
    package func resume(throwing error: any Error) {
        switch self {
        case .continuation(let continuation): continuation.resume(throwing: error)
        case .callback(let leased): leased(.failure(error))
        }
    }
}
