import HTTP2Transport
import NIOCore
import PushCore
import Synchronization

/// One Herald instance's streams to one push service in the simulation: the shipped pool state
/// machine (``HTTP2ConnectionPoolStateMachine``) over one connection whose server allows
/// `streamLimit` concurrent streams (FCM and APNs announce a limit in their SETTINGS; a low one
/// makes requests wait), opened the moment the pool plans it.
///
/// Checked at every lease: no bulk request is handed a stream while an urgent one waits for one
/// (README: urgent requests get a stream before every bulk one waiting, on every platform).
final class SimulatedStreams: Sendable {
    struct Connection: HTTP2PooledConnection {
        let id: Int
        var endpoint: HTTP2SoleEndpoint { .sole }
    }

    private typealias Pool = HTTP2ConnectionPoolStateMachine<Connection, CheckedContinuation<Connection, any Error>>

    private struct State {
        var pool: Pool
        var nextWaiterID: UInt64 = 0
        /// The urgent requests waiting for a stream.
        var waitingUrgent: Set<UInt64> = []
    }

    private let streamLimit: Int
    private let service: String
    private let state: Mutex<State>
    private let onViolation: @Sendable (String) -> Void

    init(service: String, streamLimit: Int, onViolation: @escaping @Sendable (String) -> Void) {
        self.service = service
        self.streamLimit = streamLimit
        self.onViolation = onViolation
        state = Mutex(State(pool: Pool(connectionsPerEndpoint: 1, maximumWaiters: 10_000, requiresVerification: false, peerName: service)))
    }

    /// Runs `body` on a stream leased for a request of `precedence`, and gives the stream back.
    func withStream<Answer>(precedence: StreamPrecedence, _ body: () async throws -> Answer) async throws -> Answer {
        let connection = try await lease(precedence)
        do {
            let answer = try await body()
            release(connection, status: 200)
            return answer
        } catch {
            release(connection, status: nil)
            throw error
        }
    }

    private func lease(_ precedence: StreamPrecedence) async throws -> Connection {
        let id = state.withLock { state in
            state.nextWaiterID += 1
            return state.nextWaiterID
        }
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Connection, any Error>) in
                let enqueued = state.withLock { state -> Pool.EnqueueResult? in
                    // Checked under the lock the cancellation handler takes: a task cancelled
                    // before this point never queues, one cancelled after is removed by it.
                    if Task.isCancelled { return nil }
                    let waiter = Pool.Waiter(id: id, recipient: continuation, deadline: .distantFuture, precedence: precedence)
                    var enqueued = state.pool.enqueue(waiter, for: .sole)
                    switch enqueued {
                    case .leased:
                        check(leasedTo: [waiter], in: &state)
                    case .queued(var actions):
                        if precedence == .urgent { state.waitingUrgent.insert(id) }
                        if let plan = actions.open {
                            actions.leases += state.pool.connectionReady(Connection(id: plan.connectionID), streamLimit: streamLimit).leases
                        }
                        check(leasedTo: actions.leases.map(\.waiter), in: &state)
                        enqueued = .queued(actions)
                    case .failed:
                        break
                    }
                    return enqueued
                }
                switch enqueued {
                case nil: continuation.resume(throwing: CancellationError())
                case .leased(let connection): continuation.resume(returning: connection)
                case .queued(let actions): perform(actions)
                case .failed(let error): continuation.resume(throwing: error)
                }
            }
        } onCancel: {
            removeWaiter(id)?.resume(throwing: CancellationError())
        }
    }

    /// Removes the waiter `id` if it still waits; its continuation, to resume.
    private func removeWaiter(_ id: UInt64) -> CheckedContinuation<Connection, any Error>? {
        state.withLock { state in
            state.waitingUrgent.remove(id)
            return state.pool.removeWaiter(id, for: .sole)?.recipient
        }
    }

    private func release(_ connection: Connection, status: Int?) {
        let actions = state.withLock { state in
            let actions = state.pool.release(connectionID: connection.id, endpoint: .sole, status: status)
            check(leasedTo: actions.leases.map(\.waiter), in: &state)
            return actions
        }
        perform(actions)
    }

    /// Records a bulk request handed a stream while an urgent one still waits.
    private func check(leasedTo waiters: [Pool.Waiter], in state: inout State) {
        for waiter in waiters { state.waitingUrgent.remove(waiter.id) }
        if waiters.contains(where: { $0.precedence == .bulk }), !state.waitingUrgent.isEmpty {
            onViolation("a bulk \(service) request got a stream while \(state.waitingUrgent.count) urgent ones waited for one")
        }
    }

    private func perform(_ actions: Pool.Actions) {
        for (waiter, connection) in actions.leases { waiter.recipient.resume(returning: connection) }
        for (waiter, error) in actions.failures { waiter.recipient.resume(throwing: error) }
    }
}
