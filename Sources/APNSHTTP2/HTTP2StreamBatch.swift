package import APNSWire
import NIOConcurrencyHelpers
package import NIOCore

/// A batch of requests started without a task or continuation per request: each connection gets
/// its share of the leased streams in one hop to its event loop, and each answer is read where it
/// arrives. Measured with `herald-bench sender` (BENCHMARKS.md): a task, two continuations and
/// two hops per request were most of what set the sender apart from h2load. APNs' and FCM's
/// clients both send their batches through it.
///
/// `Context` is what the client keeps with each stream (APNs: the credential's pool it goes back
/// to; FCM: the access token it carries); `Retry` is a request to send again, which runs in a
/// child task as soon as it is known: never behind the batch's slowest stream.
package final class HTTP2StreamBatch<Connection: HTTP2StreamConnection, Context: Sendable, Retry: Sendable>: Sendable {
    /// A stream leased for a request: the request's index in the caller's batch, the request, the
    /// connection and the client's context.
    package typealias Leased = (index: Int, request: Connection.Handler.Request, connection: Connection, context: Context)
    /// A leased stream as started, with its request ID on the connection.
    package typealias Stream = (
        index: Int, request: Connection.Handler.Request, connection: Connection, context: Context, requestID: UInt64
    )

    private struct State {
        var unanswered: Int
        var retries: [Retry]
        var waiter: CheckedContinuation<[Retry]?, Never>?
        var started = false
        var cancelled = false
    }

    private let streams: [Stream]
    private let state: NIOLockedValueBox<State>

    private init(_ leased: [Leased], retries: [Retry]) {
        streams = leased.map { ($0.index, $0.request, $0.connection, $0.context, $0.connection.nextRequestID()) }
        state = NIOLockedValueBox(State(unanswered: leased.count, retries: retries))
    }

    /// Starts the `leased` streams, each with `deadline` (unused when none is leased), and hands
    /// each of `alone` to `retry` at once. `finish` reads each stream's outcome on its event loop
    /// and returns the request to send again, if any, which `retry` then sends. Returns once every
    /// stream was finished and every retry returned. Cancelling the caller resets the streams:
    /// their outcomes are then `CancellationError`s, also for streams not yet started.
    package static func send(
        _ leased: [Leased],
        deadline: NIODeadline,
        alone: [Retry],
        finish: @escaping @Sendable (Stream, Result<Connection.Handler.Outcome, any Error>) -> Retry?,
        retry: @escaping @Sendable (Retry) async -> Void
    ) async {
        let batch = HTTP2StreamBatch(leased, retries: alone)
        await withDiscardingTaskGroup { group in
            await withTaskCancellationHandler {
                batch.start(deadline: deadline, finish: finish)
                while let again = await batch.nextRetries() {
                    for request in again { group.addTask { await retry(request) } }
                }
            } onCancel: {
                batch.cancel()
            }
        }
    }

    /// The streams by connection: each connection gets its share in one hop.
    private var byConnection: [[Stream]] { Array(Dictionary(grouping: streams, by: { ObjectIdentifier($0.connection) }).values) }

    /// Starts the streams, one hop per connection, unless the batch was cancelled first.
    private func start(deadline: NIODeadline, finish: @escaping @Sendable (Stream, Result<Connection.Handler.Outcome, any Error>) -> Retry?) {
        let started = state.withLockedValue { state in
            state.started = !state.cancelled
            return state.started
        }
        guard started else {
            // Cancelled before anything was sent: the leased streams go back unused.
            for stream in streams { answered(finish(stream, .failure(CancellationError()))) }
            return
        }
        for share in byConnection {
            share[0].connection.start(
                share.map { stream in (stream.requestID, stream.request, .callback { self.answered(finish(stream, $0)) }) },
                deadline: deadline
            )
        }
        // A cancellation that came while the streams were handed over may have reset them
        // before they reached their event loops: reset them again, after.
        if state.withLockedValue({ $0.cancelled }) { resetStreams() }
    }

    /// The caller was cancelled: resets the streams if they were started (a later start finds
    /// the flag and resets them itself).
    private func cancel() {
        let started = state.withLockedValue { state in
            state.cancelled = true
            return state.started
        }
        if started { resetStreams() }
    }

    private func resetStreams() {
        for share in byConnection { share[0].connection.cancel(share.map(\.requestID)) }
    }

    /// One stream was finished (`again`: its request is to be sent again).
    private func answered(_ again: Retry?) {
        let wake = state.withLockedValue { state -> (CheckedContinuation<[Retry]?, Never>, [Retry]?)? in
            if let again { state.retries.append(again) }
            state.unanswered -= 1
            guard let waiter = state.waiter, !state.retries.isEmpty || state.unanswered == 0 else { return nil }
            state.waiter = nil
            defer { state.retries = [] }
            return (waiter, state.retries.isEmpty ? nil : state.retries)
        }
        if let (waiter, retries) = wake { waiter.resume(returning: retries) }
    }

    /// The requests to send again known since the last call, waiting for the next one; nil once
    /// every stream was finished and each retry taken.
    private func nextRetries() async -> [Retry]? {
        await withCheckedContinuation { continuation in
            let now = state.withLockedValue { state -> [Retry]?? in
                if !state.retries.isEmpty {
                    defer { state.retries = [] }
                    return .some(state.retries)
                }
                if state.unanswered == 0 { return .some(nil) }
                state.waiter = continuation
                return nil
            }
            if let now { continuation.resume(returning: now) }
        }
    }
}
