public import APNSCore
import APNSWire
import NIOConcurrencyHelpers
import NIOCore

/// A batch of requests started without a task or continuation per request: the streams free
/// now are leased in one lock section per credential, each connection gets its share in one hop
/// to its event loop, and the answers are handed to the caller from there. Measured with
/// `herald-bench sender` (BENCHMARKS.md): a task, two continuations and two hops per request
/// were most of what set the sender apart from h2load.
extension APNSHTTP2Client {
    /// Sends every request, calling `answered` on the connections' event loops; what cannot
    /// take that path (no free stream, a credential being replaced, a 403 ExpiredProviderToken
    /// to retry with a new token, a stream that could not be opened) goes through
    /// ``send(_:environment:deadline:)`` in a child task, with the same guarantees.
    public func sendAll(
        _ requests: [APNSRequest],
        environment: APNSEnvironment,
        deadline: ContinuousClock.Instant,
        answered: @escaping @Sendable (Int, Result<APNSResponse, any Error>) -> Void
    ) async {
        // Past the deadline or cancelled: the single path says so per request.
        let nioDeadline = Task.isCancelled ? nil : NIODeadline.fromContinuousClock(deadline)
        let (leased, alone) =
            nioDeadline == nil
            ? ([], Array(requests.indices)) : leaseFreeStreams(for: requests, environment: environment)
        await withDiscardingTaskGroup { group in
            for index in alone {
                group.addTask { await self.send(requests[index], at: index, environment: environment, deadline: deadline, answered: answered) }
            }
            guard let nioDeadline, !leased.isEmpty else { return }
            let batch = BatchStreams(leased, of: requests)
            await withTaskCancellationHandler {
                start(batch, deadline: nioDeadline, answered: answered)
                // Each request to try again starts as soon as its first answer is known, with the
                // batch's deadline still ahead of it: never behind the batch's slowest stream.
                while let again = await batch.nextRetries() {
                    for retry in again {
                        group.addTask {
                            let index = retry.index
                            guard let first = retry.expired else {
                                return await self.send(requests[index], at: index, environment: environment, deadline: deadline, answered: answered)
                            }
                            do {
                                let response = try await self.sendAgain(requests[index], environment: environment, deadline: deadline, afterExpired: first)
                                answered(index, .success(response))
                            } catch {
                                answered(index, .failure(error))
                            }
                        }
                    }
                }
            } onCancel: {
                batch.cancel()
            }
        }
    }

    private func send(
        _ request: APNSRequest,
        at index: Int,
        environment: APNSEnvironment,
        deadline: ContinuousClock.Instant,
        answered: @Sendable (Int, Result<APNSResponse, any Error>) -> Void
    ) async {
        do {
            answered(index, .success(try await send(request, environment: environment, deadline: deadline)))
        } catch {
            answered(index, .failure(error))
        }
    }

    /// Leases a stream for each request whose credential's pool has one free now, one lock
    /// section per pool; returns those and the indexes of the rest.
    private func leaseFreeStreams(
        for requests: [APNSRequest],
        environment: APNSEnvironment
    ) -> (leased: [(index: Int, connection: APNSConnection, pool: CredentialPool)], rest: [Int]) {
        var byPool: [ObjectIdentifier: (pool: CredentialPool, indexes: [Int])] = [:]
        var rest: [Int] = []
        for (index, request) in requests.enumerated() {
            // Routing errors (no credential) are thrown again, and answered, by the single path.
            guard let pool = try? pool(for: request) else {
                rest.append(index)
                continue
            }
            byPool[ObjectIdentifier(pool), default: (pool, [])].indexes.append(index)
        }
        var leased: [(index: Int, connection: APNSConnection, pool: CredentialPool)] = []
        for (pool, indexes) in byPool.values {
            // A batch comes from one lane: its first request's precedence is every request's.
            let precedence = requests[indexes[0]].precedence
            let connections = pool.state.withLockedValue { $0.leaseFreeStreams(environment, upTo: indexes.count, precedence: precedence) }
            leased += zip(indexes, connections).map { ($0, $1, pool) }
            rest += indexes.dropFirst(connections.count)
        }
        return (leased, rest)
    }

    /// A request of a batch to send again after its first answer.
    private struct SecondTry: Sendable {
        var index: Int
        /// The first answer and its connection, for a 403 ExpiredProviderToken; nil when the
        /// stream could not be opened and the whole single path runs again.
        var expired: (outcome: APNSStreamOutcome, connection: APNSConnection)?
    }

    /// A batch's leased streams: what they still owe (the count of unanswered ones, the requests
    /// to try again not yet taken, the waiting caller) and whether they were started or cancelled,
    /// so a cancellation that lands before the streams reach their event loops still stops them.
    private final class BatchStreams: Sendable {
        typealias Stream = (index: Int, connection: APNSConnection, pool: CredentialPool, requestID: UInt64)

        private struct State {
            var unanswered: Int
            var retries: [SecondTry] = []
            var waiter: CheckedContinuation<[SecondTry]?, Never>?
            var started = false
            var cancelled = false
        }

        let streams: [Stream]
        let requests: [APNSRequest]
        private let state: NIOLockedValueBox<State>

        init(_ leased: [(index: Int, connection: APNSConnection, pool: CredentialPool)], of requests: [APNSRequest]) {
            streams = leased.map { ($0.index, $0.connection, $0.pool, $0.connection.nextRequestID()) }
            self.requests = requests
            state = NIOLockedValueBox(State(unanswered: leased.count))
        }

        /// The streams by connection: each connection gets its share in one hop.
        var byConnection: [[Stream]] { Array(Dictionary(grouping: streams, by: { ObjectIdentifier($0.connection) }).values) }

        /// Marks the streams started, unless the batch was cancelled first: false then.
        func markStarted() -> Bool {
            state.withLockedValue { state in
                state.started = !state.cancelled
                return state.started
            }
        }

        var isCancelled: Bool { state.withLockedValue { $0.cancelled } }

        /// The caller was cancelled: resets the streams if they were started (a later start
        /// finds the flag and resets them itself).
        func cancel() {
            let started = state.withLockedValue { state in
                state.cancelled = true
                return state.started
            }
            if started { resetStreams() }
        }

        func resetStreams() {
            for share in byConnection { share[0].connection.cancel(share.map(\.requestID)) }
        }

        /// One stream was answered (`again`: it is to be tried again).
        func answered(_ again: SecondTry?) {
            let wake = state.withLockedValue { state -> (CheckedContinuation<[SecondTry]?, Never>, [SecondTry]?)? in
                if let again { state.retries.append(again) }
                state.unanswered -= 1
                guard let waiter = state.waiter, !state.retries.isEmpty || state.unanswered == 0 else { return nil }
                state.waiter = nil
                defer { state.retries = [] }
                return (waiter, state.retries.isEmpty ? nil : state.retries)
            }
            if let (waiter, retries) = wake { waiter.resume(returning: retries) }
        }

        /// The requests to try again known since the last call, waiting for the next one; nil
        /// once every stream was answered and each retry taken.
        func nextRetries() async -> [SecondTry]? {
            await withCheckedContinuation { continuation in
                let now = state.withLockedValue { state -> [SecondTry]?? in
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

    /// Starts the batch's streams, one hop per connection; each answer goes to `answered` where
    /// it arrives, and each request to try again to the batch (``BatchStreams/nextRetries()``).
    private func start(
        _ batch: BatchStreams,
        deadline: NIODeadline,
        answered: @escaping @Sendable (Int, Result<APNSResponse, any Error>) -> Void
    ) {
        @Sendable func finish(_ stream: BatchStreams.Stream, _ result: Result<APNSStreamOutcome, any Error>) {
            releaseStream(on: stream.connection, status: try? result.get().response.status, pool: stream.pool)
            var again: SecondTry?
            switch result {
            case .success(let outcome) where Self.tokenExpired(outcome, on: stream.connection):
                again = SecondTry(index: stream.index, expired: (outcome, stream.connection))
            case .failure(is APNSStreamNotOpened):
                again = SecondTry(index: stream.index, expired: nil)
            default:
                answered(stream.index, result.map(\.response))
            }
            batch.answered(again)
        }
        guard batch.markStarted() else {
            // Cancelled before anything was sent: the leased streams go back unused.
            for stream in batch.streams { finish(stream, .failure(CancellationError())) }
            return
        }
        for share in batch.byConnection {
            share[0].connection.start(
                share.map { stream in (stream.requestID, batch.requests[stream.index], .callback { finish(stream, $0) }) },
                deadline: deadline
            )
        }
        // A cancellation that came while the streams were handed over may have reset them
        // before they reached their event loops: reset them again, after.
        if batch.isCancelled { batch.resetStreams() }
    }
}
