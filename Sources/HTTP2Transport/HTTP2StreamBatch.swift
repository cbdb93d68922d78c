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
    /// A request that waits in its pool for a stream; `fallback` sends it alone when it gets none.
    package typealias Waiting = (index: Int, request: Connection.Handler.Request, context: Context, fallback: Retry)
    /// A leased stream as started, with its request ID on the connection. It does not hold the
    /// request: the connection's handler keeps the one copy a stream needs (each copy of a
    /// request retains every field; in the burst benchmark those copies showed in Herald's CPU).
    package typealias Stream = (index: Int, connection: Connection, context: Context, requestID: UInt64)
    /// What finishes a stream on its event loop: given its outcome, returns its request to send
    /// again, if any.
    package typealias Finish = @Sendable (Stream, Result<Connection.Handler.Outcome, any Error>) -> Retry?

    /// How a client queues a batch's waiting requests in its pools and takes them out again.
    package struct Pools: Sendable {
        /// Queues the waiters, each with its request's context; returns each one's waiter ID.
        package var wait: @Sendable ([(context: Context, waiter: PooledStreamWaiter<Connection>)]) -> [UInt64]
        /// Removes the waiters still queued; each is told it gets no stream.
        package var stopWaiting: @Sendable ([(context: Context, id: UInt64)]) -> Void

        package init(
            wait: @escaping @Sendable ([(context: Context, waiter: PooledStreamWaiter<Connection>)]) -> [UInt64],
            stopWaiting: @escaping @Sendable ([(context: Context, id: UInt64)]) -> Void
        ) {
            self.wait = wait
            self.stopWaiting = stopWaiting
        }
    }

    private struct State {
        var unanswered: Int
        var retries: [Retry]
        var waiter: CheckedContinuation<[Retry]?, Never>?
        var started = false
        var cancelled = false
        /// Streams started when a waiting request got its stream.
        var startedLater: [Stream] = []
        /// The waiting requests' waiter IDs in their pools.
        var queued: [(context: Context, id: UInt64)] = []
    }

    private let streams: [Stream]
    /// The leased streams' requests, in the order of `streams`.
    private let requests: [Connection.Handler.Request]
    private let deadline: NIODeadline
    private let finish: Finish
    private let pools: Pools
    private let state: NIOLockedValueBox<State>

    private init(_ leased: [Leased], waiting: Int, retries: [Retry], deadline: NIODeadline, finish: @escaping Finish, pools: Pools) {
        streams = leased.map { ($0.index, $0.connection, $0.context, $0.connection.nextRequestID()) }
        requests = leased.map(\.request)
        self.deadline = deadline
        self.finish = finish
        self.pools = pools
        state = NIOLockedValueBox(State(unanswered: leased.count + waiting, retries: retries))
    }

    /// Starts the `leased` streams with `deadline`, queues `waiting` in their pools, each started
    /// when it gets a stream (where the stream was freed), and hands each of `alone` to `retry` at
    /// once. `finish` reads each stream's outcome on its event loop and returns the request to
    /// send again, if any, which `retry` then sends; so does a waiting request's `fallback` when
    /// its pool gives it no stream. Returns once every stream was finished and every retry
    /// returned. Cancelling the caller resets the streams (their outcomes are then
    /// `CancellationError`s, also for streams not yet started) and takes the waiting requests
    /// out of their pools (they fall back).
    package static func send(
        _ leased: [Leased],
        waiting: [Waiting],
        deadline: NIODeadline,
        alone: [Retry],
        pools: Pools,
        finish: @escaping Finish,
        retry: @escaping @Sendable (Retry) async -> Void
    ) async {
        let batch = HTTP2StreamBatch(leased, waiting: waiting.count, retries: alone, deadline: deadline, finish: finish, pools: pools)
        await withDiscardingTaskGroup { group in
            await withTaskCancellationHandler {
                batch.start()
                if !waiting.isEmpty { batch.queue(waiting) }
                while let again = await batch.nextRetries() {
                    for request in again { group.addTask { await retry(request) } }
                }
            } onCancel: {
                batch.cancel()
            }
        }
    }

    /// The streams by connection: each connection gets its share in one hop.
    private static func byConnection(_ streams: [Stream]) -> [[Stream]] {
        Array(Dictionary(grouping: streams, by: { ObjectIdentifier($0.connection) }).values)
    }

    /// Starts the streams, one hop per connection, unless the batch was cancelled first.
    private func start() {
        let started = state.withLockedValue { state in
            state.started = !state.cancelled
            return state.started
        }
        guard started else {
            // Cancelled before anything was sent: the leased streams go back unused.
            for stream in streams { answered(finish(stream, .failure(CancellationError()))) }
            return
        }
        var shares: [ObjectIdentifier: [(requestID: UInt64, request: Connection.Handler.Request, waiter: HTTP2StreamWaiter<Connection.Handler.Outcome>)]] = [:]
        for (stream, request) in zip(streams, requests) {
            shares[ObjectIdentifier(stream.connection), default: []].append(
                (stream.requestID, request, .callback { self.answered(self.finish(stream, $0)) })
            )
        }
        for stream in streams {
            guard let share = shares.removeValue(forKey: ObjectIdentifier(stream.connection)) else { continue }
            stream.connection.start(share, deadline: deadline)
        }
        // A cancellation that came while the streams were handed over may have reset them
        // before they reached their event loops: reset them again, after.
        if state.withLockedValue({ $0.cancelled }) { Self.reset(streams) }
    }

    /// Queues the waiting requests in their pools.
    private func queue(_ waiting: [Waiting]) {
        let ids = pools.wait(
            waiting.map { request in
                (request.context, .callback { leased in self.leased(leased, for: request) })
            }
        )
        let stop = state.withLockedValue { state in
            state.queued = zip(waiting, ids).map { ($0.context, $1) }
            return state.cancelled ? state.queued : []
        }
        // Cancelled while they were queued: the cancellation found no waiter IDs yet.
        if !stop.isEmpty { pools.stopWaiting(stop) }
    }

    /// A waiting request got its stream (or none: it falls back).
    private func leased(_ leased: Result<Connection, any Error>, for request: Waiting) {
        guard case .success(let connection) = leased else { return answered(request.fallback) }
        let stream: Stream = (request.index, connection, request.context, connection.nextRequestID())
        let cancelled = state.withLockedValue { state in
            if !state.cancelled { state.startedLater.append(stream) }
            return state.cancelled
        }
        guard !cancelled else { return answered(finish(stream, .failure(CancellationError()))) }
        connection.start([(stream.requestID, request.request, .callback { self.answered(self.finish(stream, $0)) })], deadline: deadline)
        if state.withLockedValue({ $0.cancelled }) { connection.cancel([stream.requestID]) }
    }

    /// The caller was cancelled: resets the streams if they were started (a later start finds
    /// the flag and resets them itself) and takes the waiting requests out of their pools.
    private func cancel() {
        let (started, queued) = state.withLockedValue { state in
            state.cancelled = true
            return ((state.started ? streams : []) + state.startedLater, state.queued)
        }
        Self.reset(started)
        if !queued.isEmpty { pools.stopWaiting(queued) }
    }

    private static func reset(_ streams: [Stream]) {
        for share in byConnection(streams) { share[0].connection.cancel(share.map(\.requestID)) }
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
