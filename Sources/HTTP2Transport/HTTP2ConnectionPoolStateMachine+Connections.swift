package import NIOCore
package import PushCore

/// The pool's connections: what their events change, and when a new one is planned.
extension HTTP2ConnectionPoolStateMachine {
    // MARK: Connection events

    /// The connection finished its handshake.
    package mutating func connectionReady(
        _ connection: Connection,
        streamLimit: Int
    ) -> Actions {
        if isShutDown { return Actions(close: [connection]) }
        let poolIndex = indexOfPool(connection.endpoint)
        guard let slot = pools[poolIndex].index(of: connection.id) else {
            // Already reported closed while the handshake result travelled here.
            return Actions(close: [connection])
        }
        pools[poolIndex].slots[slot].connection = connection
        pools[poolIndex].slots[slot].serverStreamLimit = streamLimit
        pools[poolIndex].lastConnectFailure = nil
        if pools[poolIndex].slots[slot].phase == .connecting {
            pools[poolIndex].slots[slot].phase = .ready
        }
        return serveWaiters(poolIndex)
    }

    /// The server changed SETTINGS_MAX_CONCURRENT_STREAMS.
    package mutating func streamLimitChanged(connectionID: Int, endpoint: Connection.Endpoint, limit: Int) -> Actions {
        let poolIndex = indexOfPool(endpoint)
        guard !isShutDown, let slot = pools[poolIndex].index(of: connectionID) else { return .none }
        pools[poolIndex].slots[slot].serverStreamLimit = limit
        return serveWaiters(poolIndex)
    }

    /// GOAWAY: the connection drains; a replacement opens when there is demand.
    package mutating func connectionGoingAway(connectionID: Int, endpoint: Connection.Endpoint) -> Actions {
        let poolIndex = indexOfPool(endpoint)
        guard !isShutDown, let slot = pools[poolIndex].index(of: connectionID) else { return .none }
        let wasBusy = pools[poolIndex].slots[slot].inUse > 0
        pools[poolIndex].slots[slot].phase = .draining
        countFailureIfUnanswered(poolIndex, slot)
        var actions = Actions()
        if wasBusy || !pools[poolIndex].waiters.isEmpty {
            actions.open = planConnectionIfNeeded(poolIndex, endpoint, evenWithoutWaiters: true)
        }
        return actions
    }

    /// The connection closed, or could not be opened (`failure` says why).
    package mutating func connectionClosed(
        connectionID: Int,
        endpoint: Connection.Endpoint,
        failure: TransportError?,
        now: NIODeadline = .now()
    ) -> Actions {
        let poolIndex = indexOfPool(endpoint)
        guard !isShutDown, let slot = pools[poolIndex].index(of: connectionID) else { return .none }
        let neverReady = pools[poolIndex].slots[slot].phase == .connecting
        if neverReady { pools[poolIndex].lastConnectFailure = now }
        countFailureIfUnanswered(poolIndex, slot)
        pools[poolIndex].slots.remove(at: slot)

        var actions = Actions()
        if neverReady && !pools[poolIndex].hasReady && !pools[poolIndex].hasConnecting {
            // Nothing can serve the queue soon: fail it now (callers retry with their own backoff)
            // rather than letting every waiter run into its deadline.
            let error = (failure ?? .connectionFailed("connection closed during the handshake")).detailed("cannot connect to \(peerName)")
            actions.failures += pools[poolIndex].waiters.removeAll().map { (waiter: $0, error: error) }
            return actions
        }
        actions.open = planConnectionIfNeeded(poolIndex, endpoint)
        return actions
    }

    // MARK: Helpers

    mutating func countFailureIfUnanswered(_ poolIndex: Int, _ slot: Int) {
        guard !pools[poolIndex].slots[slot].answered, !pools[poolIndex].slots[slot].countedAsFailure else { return }
        pools[poolIndex].slots[slot].countedAsFailure = true
        pools[poolIndex].consecutiveFailures += 1
    }

    /// Plans a new connection when callers wait (or a draining one needs replacing) and the pool is
    /// below its size. After failures only one connection attempt runs at a time, after a backoff.
    mutating func planConnectionIfNeeded(
        _ poolIndex: Int,
        _ endpoint: Connection.Endpoint,
        evenWithoutWaiters: Bool = false
    ) -> HTTP2ConnectionPlan<Connection.Endpoint>? {
        guard !isShutDown else { return nil }
        guard evenWithoutWaiters || !pools[poolIndex].waiters.isEmpty else { return nil }
        guard pools[poolIndex].liveSlots < connectionsPerEndpoint else { return nil }
        let failures = pools[poolIndex].consecutiveFailures
        if failures > 0 && pools[poolIndex].hasConnecting { return nil }
        nextConnectionID += 1
        pools[poolIndex].slots.append(
            Slot(id: nextConnectionID, phase: .connecting, verified: !requiresVerification)
        )
        return HTTP2ConnectionPlan(
            connectionID: nextConnectionID,
            endpoint: endpoint,
            delay: Self.backoff(afterFailures: failures)
        )
    }
}
