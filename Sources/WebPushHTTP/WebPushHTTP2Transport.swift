// WebPushHTTP2Transport.swift: the web push client's HTTP/2 connections on the shared transport,
// one pool state machine keyed by push-service origin.

import PushCore
import WebPushCore
import Logging
import Metrics
import NIOCore
import NIOSSL
import ServiceLifecycle
import Synchronization
import HTTP2TLS
import HTTP2Transport

/// Web Push's HTTP/2 connections on the shared transport: ``WebPushConnection`` (an
/// `HTTP2ConnectionCore` with ``WebPushExchange``) and the transport's pool state machine, with
/// an endpoint per push-service origin, as FCM's transport has its one endpoint and APNs' its
/// environments. The state machine makes an origin's pool the first time a request names it, so
/// origins need not be known up front.
///
/// Connections open lazily, up to ``WebPushClientConfiguration/connectionsPerOrigin`` per
/// origin, each carrying as many streams as the service's SETTINGS_MAX_CONCURRENT_STREAMS
/// allows; requests beyond wait until their deadline, urgent ones before every bulk one of the
/// same origin, each kind first in first out. A stream above a GOAWAY's last stream ID, or one
/// never written because its connection closed or began draining, is sent again on another
/// connection.
final class WebPushHTTP2Transport: Sendable {
    private typealias Pool = HTTP2ConnectionPoolStateMachine<WebPushConnection, PooledStreamWaiter<WebPushConnection>>

    /// How often a request whose stream was not processed moves to another connection.
    private static let maximumUnprocessedRetries = 3

    private let factory: WebPushConnectionFactory
    private let shutdownGracePeriod: Duration
    private let goAways: Counter
    private let logger: Logger
    private let pool: Mutex<Pool>
    /// The origins a connection was planned for: those the pool gauges sum over.
    private let connectedOrigins = Mutex<Set<WebPushOrigin>>([])
    private let connectionPlans: AsyncStream<HTTP2ConnectionPlan<WebPushOrigin>>
    private let connectionPlanSink: AsyncStream<HTTP2ConnectionPlan<WebPushOrigin>>.Continuation
    private let waiterIDs = Atomic<UInt64>(0)

    /// Reads the trust roots; throws NIOSSL's error when they cannot be read.
    init(configuration: WebPushClientConfiguration, eventLoopGroup: any EventLoopGroup, countingGoAwaysIn goAways: Counter, logger: Logger) throws {
        var tls = TLSConfiguration.makeClientConfiguration()
        tls.applicationProtocols = ["h2"]
        if let path = configuration.additionalTrustRootsPEMPath {
            tls.additionalTrustRoots = [.certificates(try NIOSSLCertificate.fromPEMFile(path))]
        }
        factory = WebPushConnectionFactory(
            connector: HTTP2TLSConnector(
                eventLoopGroup: eventLoopGroup,
                sslContext: try NIOSSLContext(configuration: tls),
                connectTimeout: configuration.connectTimeout,
                pingInterval: configuration.pingInterval,
                pingTimeout: configuration.pingTimeout
            ),
            maximumAnswerBytes: configuration.maximumResponseBytes
        )
        shutdownGracePeriod = configuration.shutdownGracePeriod
        self.goAways = goAways
        self.logger = logger
        pool = Mutex(
            Pool(
                connectionsPerEndpoint: configuration.connectionsPerOrigin,
                maximumWaiters: configuration.maximumQueuedRequests,
                requiresVerification: false,
                peerName: WebPushExchange.peerName
            )
        )
        (connectionPlans, connectionPlanSink) = AsyncStream.makeStream(of: HTTP2ConnectionPlan<WebPushOrigin>.self)
    }

    // MARK: Running

    /// Opens connections as the pool asks for them until ``shutDown()`` or cancellation, then
    /// waits for them to close.
    func run() async {
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
    func shutDown() {
        connectionPlanSink.finish()
        let (waiters, connections, timer) = pool.withLock { $0.shutDown() }
        timer?.cancel()
        for waiter in waiters { waiter.recipient.resume(throwing: TransportError.shuttingDown("web push client is shutting down")) }
        for connection in connections { connection.closeGracefully(within: shutdownGracePeriod) }
    }

    private func runConnection(_ plan: HTTP2ConnectionPlan<WebPushOrigin>) async {
        let origin = plan.endpoint
        connectedOrigins.withLock { _ = $0.insert(origin) }
        var logger = self.logger
        logger[metadataKey: "webpush.connection_id"] = "\(plan.connectionID)"
        logger[metadataKey: "webpush.origin"] = "\(origin.address)"
        let connection: WebPushConnection
        let streamLimit: Int
        do {
            let (factory, connectionLogger) = (self.factory, logger)
            (connection, streamLimit) = try await cancelWhenGracefulShutdown {
                if plan.delay > .zero {
                    var generator = SystemRandomNumberGenerator()
                    try await Task.sleep(for: Backoff.reconnection.jittered(plan.delay, using: &generator))
                }
                return try await factory.connect(id: plan.connectionID, to: origin, logger: connectionLogger) { [weak self] event in
                    self?.connectionEvent(event, connectionID: plan.connectionID, origin: origin)
                }
            }
        } catch {
            if !(error is CancellationError) { logger.warning("Connecting to the push service failed", metadata: ["error": "\(error)"]) }
            let failure = error as? TransportError ?? .connectionFailed("\(error)")
            perform(pool.withLock { $0.connectionClosed(connectionID: plan.connectionID, endpoint: origin, failure: failure) })
            return
        }
        logger.debug("Connected to the push service", metadata: ["webpush.max_concurrent_streams": "\(streamLimit)"])
        perform(pool.withLock { $0.connectionReady(connection, streamLimit: streamLimit) })
        await connection.runUntilClosed()
        perform(pool.withLock { $0.connectionClosed(connectionID: plan.connectionID, endpoint: origin, failure: nil) })
        logger.debug("Push service connection closed")
    }

    private func connectionEvent(_ event: HTTP2ConnectionEvent, connectionID: Int, origin: WebPushOrigin) {
        let actions = pool.withLock { pool in
            switch event {
            case .streamLimitChanged(let limit):
                return pool.streamLimitChanged(connectionID: connectionID, endpoint: origin, limit: limit)
            case .goingAway:
                return pool.connectionGoingAway(connectionID: connectionID, endpoint: origin)
            case .closed(let failure):
                return pool.connectionClosed(connectionID: connectionID, endpoint: origin, failure: failure)
            }
        }
        if case .goingAway(let code, let reason) = event {
            goAways.increment()
            logger.info(
                "The push service sent GOAWAY; draining the connection",
                metadata: [
                    "webpush.origin": "\(origin.address)", "webpush.goaway_code": "\(code)", "webpush.goaway_reason": "\(reason ?? "none")",
                ]
            )
        }
        perform(actions)
    }

    /// Connections open (not draining) and the streams in use now, over every origin.
    var usage: (connections: Int, streamsInUse: Int) {
        let origins = connectedOrigins.withLock { $0 }
        return pool.withLock { pool in
            var usage = (connections: 0, streamsInUse: 0)
            for origin in origins {
                let snapshot = pool.snapshot(origin)
                usage.connections += snapshot.liveConnections
                usage.streamsInUse += snapshot.streamsInUse
            }
            return usage
        }
    }

    // MARK: Sending

    /// Sends `request` to `origin` and returns the push service's answer. Throws
    /// ``TransportError`` when no answer arrived (``TransportError/reading(_:deadlinePassed:)``
    /// reads it), or `CancellationError`.
    func send(
        _ request: WebPushSendRequest,
        to origin: WebPushOrigin,
        deadline: ContinuousClock.Instant,
        precedence: StreamPrecedence
    ) async throws -> WebPushResponse {
        let remaining = ContinuousClock.now.duration(to: deadline)
        guard remaining > .zero else { throw TransportError.deadlineExceeded("the deadline passed before the request") }
        let nioDeadline = NIODeadline.now() + TimeAmount(remaining)
        var unprocessed = 0
        while true {
            let connection = try await leaseStream(origin, deadline: nioDeadline, precedence: precedence)
            do {
                let response = try await connection.execute(request, deadline: nioDeadline)
                release(connection, status: response.status)
                return response
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

    /// A stream of `origin` for each of up to `count` requests of `precedence`, as many as are
    /// free now (none while requests it must wait behind wait for one); each goes back with
    /// ``release(_:status:)``.
    func leaseFreeStreams(_ origin: WebPushOrigin, upTo count: Int, precedence: StreamPrecedence) -> [WebPushConnection] {
        pool.withLock { $0.leaseFreeStreams(origin, upTo: count, precedence: precedence, preferring: \.isOnCurrentEventLoop) }
    }

    private func leaseStream(_ origin: WebPushOrigin, deadline: NIODeadline, precedence: StreamPrecedence) async throws -> WebPushConnection {
        switch pool.withLock({ $0.leaseIfAvailable(origin, precedence: precedence) }) {
        case .leased(let connection): return connection
        case .failed(let error): throw error
        case .mustWait: break
        }
        let waiterID = waiterIDs.wrappingAdd(1, ordering: .relaxed).newValue
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { continuation in
                let waiter = Pool.Waiter(id: waiterID, recipient: .continuation(continuation), deadline: deadline, precedence: precedence)
                switch pool.withLock({ $0.enqueue(waiter, for: origin) }) {
                case .leased(let connection):
                    continuation.resume(returning: connection)
                case .failed(let error):
                    continuation.resume(throwing: error)
                case .queued(let actions):
                    perform(actions)
                    // The cancellation handler may have run before the waiter was queued.
                    if Task.isCancelled { cancelWaiter(waiterID, origin: origin) }
                }
            }
        } onCancel: {
            self.cancelWaiter(waiterID, origin: origin)
        }
    }

    /// Queues the requests of a batch that found no free stream (``leaseFreeStreams(_:upTo:precedence:)``),
    /// one lock section per origin; returns their waiter IDs in order (for ``stopWaiting(_:)``).
    func wait(
        _ waiters: [(origin: WebPushOrigin, waiter: PooledStreamWaiter<WebPushConnection>)],
        deadline: NIODeadline,
        precedence: StreamPrecedence
    ) -> [UInt64] {
        let queued = waiters.map { origin, waiter in
            let id = waiterIDs.wrappingAdd(1, ordering: .relaxed).newValue
            return (origin: origin, waiter: Pool.Waiter(id: id, recipient: waiter, deadline: deadline, precedence: precedence))
        }
        for (origin, share) in Dictionary(grouping: queued, by: { $0.origin }) {
            let poolWaiters = share.map { $0.waiter }
            perform(pool.withLock { $0.enqueue(poolWaiters, for: origin) })
        }
        return queued.map { $0.waiter.id }
    }

    /// Takes the waiters still queued out of their pools; each is told it gets no stream.
    func stopWaiting(_ waiters: [(origin: WebPushOrigin, id: UInt64)]) {
        for waiter in waiters { cancelWaiter(waiter.id, origin: waiter.origin) }
    }

    private func cancelWaiter(_ id: UInt64, origin: WebPushOrigin) {
        pool.withLock { $0.removeWaiter(id, for: origin) }?.recipient.resume(throwing: CancellationError())
    }

    /// Gives a leased stream back; `status` is the push service's answer, nil when there was none.
    func release(_ connection: WebPushConnection, status: Int?) {
        perform(pool.withLock { $0.release(connectionID: connection.id, endpoint: connection.endpoint, status: status) })
    }

    private func perform(_ actions: Pool.Actions) {
        for (waiter, connection) in actions.leases { waiter.recipient.resume(returning: connection) }
        for (waiter, error) in actions.failures { waiter.recipient.resume(throwing: error) }
        if let plan = actions.open, case .terminated = connectionPlanSink.yield(plan) {
            // run() has ended: report the plan as failed to keep the pool consistent.
            let failure = TransportError.shuttingDown("web push client stopped")
            perform(pool.withLock { $0.connectionClosed(connectionID: plan.connectionID, endpoint: plan.endpoint, failure: failure) })
        }
        for connection in actions.close { connection.close() }
        actions.cancelWaiterTimer?.cancel()
        if let deadline = actions.armWaiterTimer {
            let timer = factory.connector.eventLoopGroup.any().scheduleTask(deadline: deadline) {
                self.perform(self.pool.withLock { $0.waiterTimerFired(timerDeadline: deadline, now: .now()) })
            }
            if !pool.withLock({ $0.attachWaiterTimer(timer, deadline: deadline) }) { timer.cancel() }
        }
    }
}
