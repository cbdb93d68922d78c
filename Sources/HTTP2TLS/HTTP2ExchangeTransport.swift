package import HTTP2Transport
package import Logging
package import NIOCore
package import PushCore
import ServiceLifecycle
import Synchronization

/// The pooled HTTP/2 + TLS connections of a client whose requests are one exchange's: one
/// ``HTTP2ConnectionPoolStateMachine`` keyed by endpoint, its connections
/// ``HTTP2ExchangeConnection``s. FCM's client has one endpoint (`HTTP2SoleEndpoint`), web push's
/// one per push-service origin (the state machine makes an endpoint's pool the first time a
/// request names it).
///
/// Connections open lazily, up to `connectionsPerEndpoint` per endpoint, each carrying as many
/// streams as the server's SETTINGS_MAX_CONCURRENT_STREAMS allows; requests beyond wait until
/// their deadline, urgent ones before every bulk one of the same endpoint, each kind first in
/// first out. A stream above a GOAWAY's last stream ID, or one never written because its
/// connection closed or began draining, is sent again on another connection.
package final class HTTP2ExchangeTransport<Exchange: HTTP2Exchange, Endpoint: Hashable & Sendable>: Sendable
where Exchange.Request: Sendable, Exchange: SendableMetatype {
    package typealias Connection = HTTP2ExchangeConnection<Exchange, Endpoint>
    private typealias Pool = HTTP2ConnectionPoolStateMachine<Connection, PooledStreamWaiter<Connection>>

    /// How to reach an endpoint and speak to it.
    package struct Peer: Sendable {
        /// Where an endpoint's connections go.
        package var address: @Sendable (Endpoint) -> HTTP2ServerAddress
        /// A new connection's exchange, from its endpoint and configuration (its `:authority`).
        package var exchange: @Sendable (Endpoint, HTTP2ConnectionConfiguration) -> Exchange
        /// The HTTP status of an answer, for the pool's reading of overload answers.
        package var status: @Sendable (Exchange.Outcome) -> Int?
        /// Called at each GOAWAY (a metric).
        package var goAwayReceived: @Sendable () -> Void

        package init(
            address: @escaping @Sendable (Endpoint) -> HTTP2ServerAddress,
            exchange: @escaping @Sendable (Endpoint, HTTP2ConnectionConfiguration) -> Exchange,
            status: @escaping @Sendable (Exchange.Outcome) -> Int?,
            goAwayReceived: @escaping @Sendable () -> Void
        ) {
            self.address = address
            self.exchange = exchange
            self.status = status
            self.goAwayReceived = goAwayReceived
        }
    }

    /// How often a request whose stream was not processed moves to another connection.
    private static var maximumUnprocessedRetries: Int { 3 }

    private let connector: HTTP2TLSConnector
    private let peer: Peer
    private let shutdownGracePeriod: Duration
    private let logger: Logger
    private let pool: Mutex<Pool>
    /// The endpoints a connection was planned for: those the pool gauges sum over.
    private let connectedEndpoints = Mutex<Set<Endpoint>>([])
    private let connectionPlans: AsyncStream<HTTP2ConnectionPlan<Endpoint>>
    private let connectionPlanSink: AsyncStream<HTTP2ConnectionPlan<Endpoint>>.Continuation
    private let waiterIDs = Atomic<UInt64>(0)

    /// `logger` names the client; each connection's lines add its ID and endpoint.
    package init(
        connector: HTTP2TLSConnector,
        peer: Peer,
        connectionsPerEndpoint: Int,
        maximumWaiters: Int,
        shutdownGracePeriod: Duration,
        logger: Logger
    ) {
        self.connector = connector
        self.peer = peer
        self.shutdownGracePeriod = shutdownGracePeriod
        self.logger = logger
        pool = Mutex(
            Pool(
                connectionsPerEndpoint: connectionsPerEndpoint,
                maximumWaiters: maximumWaiters,
                requiresVerification: false,
                peerName: Exchange.peerName
            )
        )
        (connectionPlans, connectionPlanSink) = AsyncStream.makeStream(of: HTTP2ConnectionPlan<Endpoint>.self)
    }

    // MARK: Running

    /// Opens connections as the pool asks for them until ``shutDown()`` or cancellation, then
    /// waits for them to close.
    package func run() async {
        await withDiscardingTaskGroup { group in
            for await plan in connectionPlans {
                group.addTask { await self.runConnection(plan) }
            }
            // The plans end at shutDown() or when this task is cancelled; in the latter case the
            // group's children are cancelled too and close their channels.
            shutDown()
        }
    }

    /// Takes no more requests: waiting ones fail, connections close once their streams finished
    /// (at the latest after the grace period, failing what is left with a connection error).
    package func shutDown() {
        connectionPlanSink.finish()
        let (waiters, connections, timer) = pool.withLock { $0.shutDown() }
        timer?.cancel()
        for waiter in waiters { waiter.recipient.resume(throwing: TransportError.shuttingDown("the \(Exchange.peerName) client is shutting down")) }
        for connection in connections { connection.closeGracefully(within: shutdownGracePeriod) }
    }

    private func runConnection(_ plan: HTTP2ConnectionPlan<Endpoint>) async {
        let endpoint = plan.endpoint
        connectedEndpoints.withLock { _ = $0.insert(endpoint) }
        let address = peer.address(endpoint)
        var logger = self.logger
        logger[metadataKey: "http2.connection_id"] = "\(plan.connectionID)"
        logger[metadataKey: "http2.peer"] = "\(address)"
        let connection: Connection
        let streamLimit: Int
        do {
            let (connector, exchange, connectionLogger) = (self.connector, peer.exchange, logger)
            (connection, streamLimit) = try await cancelWhenGracefulShutdown {
                if plan.delay > .zero {
                    var generator = SystemRandomNumberGenerator()
                    try await Task.sleep(for: Backoff.reconnection.jittered(plan.delay, using: &generator))
                }
                return try await Connection.connect(
                    id: plan.connectionID, endpoint: endpoint, address: address, connector: connector, logger: connectionLogger
                ) { [weak self] event in
                    self?.connectionEvent(event, connectionID: plan.connectionID, endpoint: endpoint)
                } exchange: { configuration in
                    exchange(endpoint, configuration)
                }
            }
        } catch {
            if !(error is CancellationError) { logger.warning("Connecting to \(Exchange.peerName) failed", metadata: ["error": "\(error)"]) }
            let failure = error as? TransportError ?? .connectionFailed("\(error)")
            perform(pool.withLock { $0.connectionClosed(connectionID: plan.connectionID, endpoint: endpoint, failure: failure) })
            return
        }
        logger.debug("Connected to \(Exchange.peerName)", metadata: ["http2.max_concurrent_streams": "\(streamLimit)"])
        perform(pool.withLock { $0.connectionReady(connection, streamLimit: streamLimit) })
        await connection.runUntilClosed()
        perform(pool.withLock { $0.connectionClosed(connectionID: plan.connectionID, endpoint: endpoint, failure: nil) })
        logger.debug("\(Exchange.peerName) connection closed")
    }

    private func connectionEvent(_ event: HTTP2ConnectionEvent, connectionID: Int, endpoint: Endpoint) {
        let actions = pool.withLock { pool in
            switch event {
            case .streamLimitChanged(let limit):
                return pool.streamLimitChanged(connectionID: connectionID, endpoint: endpoint, limit: limit)
            case .goingAway:
                return pool.connectionGoingAway(connectionID: connectionID, endpoint: endpoint)
            case .closed(let failure):
                return pool.connectionClosed(connectionID: connectionID, endpoint: endpoint, failure: failure)
            }
        }
        if case .goingAway(let code, let reason) = event {
            peer.goAwayReceived()
            logger.info(
                "\(Exchange.peerName) sent GOAWAY; draining the connection",
                metadata: ["http2.peer": "\(peer.address(endpoint))", "http2.goaway_code": "\(code)", "http2.goaway_reason": "\(reason ?? "none")"]
            )
        }
        perform(actions)
    }

    /// Connections open (not draining) and the streams in use now, over every endpoint.
    package var usage: (connections: Int, streamsInUse: Int) {
        let endpoints = connectedEndpoints.withLock { $0 }
        return pool.withLock { pool in
            var usage = (connections: 0, streamsInUse: 0)
            for endpoint in endpoints {
                let snapshot = pool.snapshot(endpoint)
                usage.connections += snapshot.liveConnections
                usage.streamsInUse += snapshot.streamsInUse
            }
            return usage
        }
    }

    // MARK: Sending

    /// Sends `request` to `endpoint` and returns the answer. Throws ``TransportError`` when no
    /// answer arrived (``TransportError/reading(_:deadlinePassed:)`` reads it), or `CancellationError`.
    package func send(
        _ request: Exchange.Request,
        to endpoint: Endpoint,
        deadline: ContinuousClock.Instant,
        precedence: StreamPrecedence
    ) async throws -> Exchange.Outcome {
        let remaining = ContinuousClock.now.duration(to: deadline)
        guard remaining > .zero else { throw TransportError.deadlineExceeded("the deadline passed before the request") }
        let nioDeadline = NIODeadline.now() + TimeAmount(remaining)
        var unprocessed = 0
        while true {
            let connection = try await leaseStream(endpoint, deadline: nioDeadline, precedence: precedence)
            do {
                let answer = try await connection.execute(request, deadline: nioDeadline)
                release(connection, status: peer.status(answer))
                return answer
            } catch let notProcessed as HTTP2StreamNotOpened {
                // Never written, or above a GOAWAY's last stream ID: the pool already knows the
                // connection takes no new streams, so the next lease picks another one.
                release(connection, status: nil)
                unprocessed += 1
                if unprocessed >= Self.maximumUnprocessedRetries { throw notProcessed.transportError }
            } catch {
                release(connection, status: nil)
                throw error
            }
        }
    }

    /// A stream of `endpoint` for each of up to `count` requests of `precedence`, as many as are
    /// free now (none while requests it must wait behind wait for one); each goes back with
    /// ``release(_:status:)``.
    package func leaseFreeStreams(_ endpoint: Endpoint, upTo count: Int, precedence: StreamPrecedence) -> [Connection] {
        pool.withLock { $0.leaseFreeStreams(endpoint, upTo: count, precedence: precedence, preferring: \.isOnCurrentEventLoop) }
    }

    private func leaseStream(_ endpoint: Endpoint, deadline: NIODeadline, precedence: StreamPrecedence) async throws -> Connection {
        switch pool.withLock({ $0.leaseIfAvailable(endpoint, precedence: precedence) }) {
        case .leased(let connection): return connection
        case .failed(let error): throw error
        case .mustWait: break
        }
        let waiterID = waiterIDs.wrappingAdd(1, ordering: .relaxed).newValue
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { continuation in
                let waiter = Pool.Waiter(id: waiterID, recipient: .continuation(continuation), deadline: deadline, precedence: precedence)
                switch pool.withLock({ $0.enqueue(waiter, for: endpoint) }) {
                case .leased(let connection):
                    continuation.resume(returning: connection)
                case .failed(let error):
                    continuation.resume(throwing: error)
                case .queued(let actions):
                    perform(actions)
                    // The cancellation handler may have run before the waiter was queued.
                    if Task.isCancelled { cancelWaiter(waiterID, endpoint: endpoint) }
                }
            }
        } onCancel: {
            self.cancelWaiter(waiterID, endpoint: endpoint)
        }
    }

    /// Queues the requests of a batch that found no free stream
    /// (``leaseFreeStreams(_:upTo:precedence:)``), one lock section per endpoint; returns their
    /// waiter IDs in order (for ``stopWaiting(_:)``).
    package func wait(
        _ waiters: [(endpoint: Endpoint, waiter: PooledStreamWaiter<Connection>)],
        deadline: NIODeadline,
        precedence: StreamPrecedence
    ) -> [UInt64] {
        let queued = waiters.map { endpoint, waiter in
            let id = waiterIDs.wrappingAdd(1, ordering: .relaxed).newValue
            return (endpoint: endpoint, waiter: Pool.Waiter(id: id, recipient: waiter, deadline: deadline, precedence: precedence))
        }
        for (endpoint, share) in Dictionary(grouping: queued, by: { $0.endpoint }) {
            let poolWaiters = share.map { $0.waiter }
            perform(pool.withLock { $0.enqueue(poolWaiters, for: endpoint) })
        }
        return queued.map { $0.waiter.id }
    }

    /// Takes the waiters still queued out of their pools; each is told it gets no stream.
    package func stopWaiting(_ waiters: [(endpoint: Endpoint, id: UInt64)]) {
        for waiter in waiters { cancelWaiter(waiter.id, endpoint: waiter.endpoint) }
    }

    private func cancelWaiter(_ id: UInt64, endpoint: Endpoint) {
        pool.withLock { $0.removeWaiter(id, for: endpoint) }?.recipient.resume(throwing: CancellationError())
    }

    /// Gives a leased stream back; `status` is the answer's, nil when there was none.
    package func release(_ connection: Connection, status: Int?) {
        perform(pool.withLock { $0.release(connectionID: connection.id, endpoint: connection.endpoint, status: status) })
    }

    private func perform(_ actions: Pool.Actions) {
        for (waiter, connection) in actions.leases { waiter.recipient.resume(returning: connection) }
        for (waiter, error) in actions.failures { waiter.recipient.resume(throwing: error) }
        if let plan = actions.open, case .terminated = connectionPlanSink.yield(plan) {
            // run() has ended: report the plan as failed to keep the pool consistent.
            let failure = TransportError.shuttingDown("the \(Exchange.peerName) client stopped")
            perform(pool.withLock { $0.connectionClosed(connectionID: plan.connectionID, endpoint: plan.endpoint, failure: failure) })
        }
        for connection in actions.close { connection.close() }
        actions.cancelWaiterTimer?.cancel()
        if let deadline = actions.armWaiterTimer {
            let timer = connector.eventLoopGroup.any().scheduleTask(deadline: deadline) {
                self.perform(self.pool.withLock { $0.waiterTimerFired(timerDeadline: deadline, now: .now()) })
            }
            if !pool.withLock({ $0.attachWaiterTimer(timer, deadline: deadline) }) { timer.cancel() }
        }
    }
}
