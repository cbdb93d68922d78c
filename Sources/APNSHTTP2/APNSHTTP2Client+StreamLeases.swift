import HTTP2Transport
import APNSCore
import PushCore
import Synchronization
import NIOConcurrencyHelpers
import NIOCore

/// Stream leases: a request waits for a stream of its credential's pool, gives it back with
/// APNs' status, and the pool's state machine decides what follows; plus the pool's gauges.
extension APNSHTTP2Client {
    func leaseStream(
        environment: APNSEnvironment,
        deadline: NIODeadline,
        precedence: StreamPrecedence,
        pool: CredentialPool
    ) async throws -> APNSConnection {
        switch pool.state.withLockedValue({ $0.leaseIfAvailable(environment, precedence: precedence) }) {
        case .leased(let connection): return connection
        case .failed(let error): throw error
        case .mustWait: break
        }

        let waiterID = waiterIDs.wrappingAdd(1, ordering: .relaxed).newValue
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { continuation in
                let waiter = PoolStateMachine.Waiter(id: waiterID, recipient: .continuation(continuation), deadline: deadline, precedence: precedence)
                switch pool.state.withLockedValue({ $0.enqueue(waiter, for: environment) }) {
                case .leased(let connection):
                    continuation.resume(returning: connection)
                case .failed(let error):
                    continuation.resume(throwing: error)
                case .queued(let actions):
                    perform(actions, pool: pool)
                    if Task.isCancelled {
                        // The cancellation handler may have run before the waiter was queued.
                        cancelWaiter(waiterID, environment: environment, pool: pool)
                    }
                }
            }
        } onCancel: {
            self.cancelWaiter(waiterID, environment: environment, pool: pool)
        }
    }

    /// Queues the requests of a batch that found no free stream in their pools, one lock section
    /// per pool; returns their waiter IDs (for ``cancelWaiter(_:environment:pool:)``).
    func wait(
        _ waiters: [(context: CredentialPool, waiter: PooledStreamWaiter<APNSConnection>)],
        environment: APNSEnvironment,
        deadline: NIODeadline,
        precedence: StreamPrecedence
    ) -> [UInt64] {
        let queued = waiters.map { pool, waiter in
            let id = waiterIDs.wrappingAdd(1, ordering: .relaxed).newValue
            return (pool, PoolStateMachine.Waiter(id: id, recipient: waiter, deadline: deadline, precedence: precedence))
        }
        for (_, share) in Dictionary(grouping: queued, by: { ObjectIdentifier($0.0) }) {
            let pool = share[0].0
            perform(pool.state.withLockedValue { $0.enqueue(share.map(\.1), for: environment) }, pool: pool)
        }
        return queued.map(\.1.id)
    }

    func cancelWaiter(_ id: UInt64, environment: APNSEnvironment, pool: CredentialPool) {
        guard let waiter = pool.state.withLockedValue({ $0.removeWaiter(id, for: environment) }) else { return }
        waiter.recipient.resume(throwing: CancellationError())
    }

    func waiterTimerFired(_ deadline: NIODeadline, pool: CredentialPool) {
        perform(pool.state.withLockedValue { $0.waiterTimerFired(timerDeadline: deadline, now: .now()) }, pool: pool)
    }

    func releaseStream(on connection: APNSConnection, status: Int?, pool: CredentialPool) {
        let actions = pool.state.withLockedValue {
            $0.release(connectionID: connection.id, endpoint: connection.environment, status: status)
        }
        perform(actions, pool: pool)
    }

    func perform(_ actions: PoolStateMachine.Actions, pool: CredentialPool) {
        for (waiter, connection) in actions.leases {
            waiter.recipient.resume(returning: connection)
        }
        for (waiter, error) in actions.failures {
            waiter.recipient.resume(throwing: error)
        }
        if let plan = actions.open { requestConnection(plan, pool: pool) }
        for connection in actions.close { connection.close() }
        actions.cancelWaiterTimer?.cancel()
        if let deadline = actions.armWaiterTimer {
            let timer = eventLoopGroup.any().scheduleTask(deadline: deadline) {
                self.waiterTimerFired(deadline, pool: pool)
            }
            if !pool.state.withLockedValue({ $0.attachWaiterTimer(timer, deadline: deadline) }) { timer.cancel() }
        }
    }

    /// Live connections to `environment`'s endpoint and the most streams one carried at once, for
    /// the credential requests with `topic` use (the default credential when nil).
    func poolSnapshot(
        _ environment: APNSEnvironment,
        topic: String? = nil
    ) -> (liveConnections: Int, peakStreamsPerConnection: Int, streamsInUse: Int) {
        let routing = routing.withLockedValue { $0.routing }
        guard let pool = topic.flatMap({ routing.poolsByTopic[$0] }) ?? routing.defaultPool else { return (0, 0, 0) }
        return pool.state.withLockedValue { $0.snapshot(environment) }
    }

    /// Records the connections open and the streams in use per endpoint, over every credential's
    /// pool (`herald_apns_connections`, `herald_apns_streams_in_use`).
    public func recordPoolState() {
        let pools = currentPools
        for environment in [APNSEnvironment.production, .sandbox] {
            let usage = pools.map { pool in pool.state.withLockedValue { $0.snapshot(environment) } }
            metrics.recordUsage(
                environment,
                connections: usage.map(\.liveConnections).reduce(0, +),
                streamsInUse: usage.map(\.streamsInUse).reduce(0, +)
            )
        }
    }

    /// How many connection pools (distinct credentials) the client has.
    var credentialCount: Int { currentPools.count }

    /// The pools of the credentials in use (not those retired and draining).
    private var currentPools: [CredentialPool] {
        routing.withLockedValue { Array($0.routing.poolsByIdentity.values) }
    }

    /// Whether Herald can reach APNs as far as its own connections tell
    /// (``HTTP2EndpointReachability/isReachable(_:now:)``). It opens nothing: readiness probes and
    /// scrapes must never connect to APNs (Apple treats rapid connect and disconnect as an
    /// attack), so an endpoint Herald has not needed yet counts as reachable until a real request
    /// fails to connect.
    public var endpointsReachable: Bool {
        let states = currentPools.flatMap { pool in
            [APNSEnvironment.production, .sandbox].map { environment in pool.state.withLockedValue { $0.reachability(environment) } }
        }
        return HTTP2EndpointReachability.isReachable(states, now: .now())
    }
}
