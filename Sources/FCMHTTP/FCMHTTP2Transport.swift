import PushCore
import Foundation
import Logging
import Metrics
import NIOCore
import NIOPosix
import NIOSSL
import ServiceLifecycle
import Synchronization
import HTTP2TLS
import HTTP2Transport

/// FCM's HTTP/2 connections on the shared transport: ``FCMConnection`` (an
/// `HTTP2ConnectionCore` with ``FCMExchange``) and the transport's pool state machine, for one
/// endpoint.
///
/// Hand-written only as far as a measurement justified it: `herald-bench fcm-sender` found
/// AsyncHTTPClient to be most of the sender's CPU per request, far above h2load's whole cost on
/// the same mock, while APNs' sender over this frame code stays within a small multiple of
/// h2load's (BENCHMARKS.md, "The FCM sender"). Nothing new was written for the wire but FCM's
/// header block and answer (``FCMExchange``); BENCHMARKS.md, "FCM over Herald's own HTTP/2
/// client", has what it bought.
///
/// Connections open lazily, up to ``FCMClientConfiguration/connections``, each carrying as many
/// streams as FCM's SETTINGS_MAX_CONCURRENT_STREAMS allows; requests beyond wait until their
/// deadline, urgent ones before every bulk one, each kind first in first out. A stream above a
/// GOAWAY's last stream ID, or one never written because its connection closed or began
/// draining, is sent again on another connection.
final class FCMHTTP2Transport: Sendable {
    private typealias Pool = HTTP2ConnectionPoolStateMachine<FCMConnection, PooledStreamWaiter<FCMConnection>>

    /// How often a request whose stream was not processed moves to another connection.
    private static let maximumUnprocessedRetries = 3

    private let factory: FCMConnectionFactory
    private let shutdownGracePeriod: Duration
    private let goAways: Counter
    private let logger: Logger
    private let pool: Mutex<Pool>
    private let connectionPlans: AsyncStream<HTTP2ConnectionPlan<HTTP2SoleEndpoint>>
    private let connectionPlanSink: AsyncStream<HTTP2ConnectionPlan<HTTP2SoleEndpoint>>.Continuation
    private let waiterIDs = Atomic<UInt64>(0)

    /// The path every send's path starts with: the base URL's own path, if any.
    let pathPrefix: String

    /// Reads the base URL and the trust roots; throws NIOSSL's error when the roots cannot be read.
    init(configuration: FCMClientConfiguration, eventLoopGroup: any EventLoopGroup, countingGoAwaysIn goAways: Counter, logger: Logger) throws {
        guard let url = URL(string: configuration.baseURL), url.scheme == "https", let host = url.host, !host.isEmpty else {
            throw FCMConfigurationError("the FCM base URL must be https://host[:port][/path]")
        }
        var tls = TLSConfiguration.makeClientConfiguration()
        tls.applicationProtocols = ["h2"]
        if let path = configuration.additionalTrustRootsPEMPath {
            tls.additionalTrustRoots = [.certificates(try NIOSSLCertificate.fromPEMFile(path))]
        }
        let hostWithoutBrackets = host.hasPrefix("[") && host.hasSuffix("]") ? String(host.dropFirst().dropLast()) : host
        factory = FCMConnectionFactory(
            connector: HTTP2TLSConnector(
                eventLoopGroup: eventLoopGroup,
                sslContext: try NIOSSLContext(configuration: tls),
                connectTimeout: configuration.connectTimeout,
                pingInterval: configuration.pingInterval,
                pingTimeout: configuration.pingTimeout
            ),
            endpoint: HTTP2ServerAddress(host: hostWithoutBrackets, port: url.port ?? 443),
            maximumAnswerBytes: configuration.maximumResponseBytes
        )
        pathPrefix = url.path == "/" ? "" : url.path
        shutdownGracePeriod = configuration.shutdownGracePeriod
        self.goAways = goAways
        self.logger = logger
        pool = Mutex(
            Pool(
                connectionsPerEndpoint: configuration.connections,
                maximumWaiters: configuration.maximumQueuedRequests,
                requiresVerification: false,
                peerName: "FCM"
            )
        )
        (connectionPlans, connectionPlanSink) = AsyncStream.makeStream(of: HTTP2ConnectionPlan<HTTP2SoleEndpoint>.self)
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
        for waiter in waiters { waiter.recipient.resume(throwing: TransportError.shuttingDown("FCM client is shutting down")) }
        for connection in connections { connection.closeGracefully(within: shutdownGracePeriod) }
    }

    private func runConnection(_ plan: HTTP2ConnectionPlan<HTTP2SoleEndpoint>) async {
        var logger = self.logger
        logger[metadataKey: "fcm.connection_id"] = "\(plan.connectionID)"
        let connection: FCMConnection
        let streamLimit: Int
        do {
            let (factory, connectionLogger) = (self.factory, logger)
            (connection, streamLimit) = try await cancelWhenGracefulShutdown {
                if plan.delay > .zero {
                    var generator = SystemRandomNumberGenerator()
                    try await Task.sleep(for: Backoff.reconnection.jittered(plan.delay, using: &generator))
                }
                return try await factory.connect(id: plan.connectionID, logger: connectionLogger) { [weak self] event in
                    self?.connectionEvent(event, connectionID: plan.connectionID)
                }
            }
        } catch {
            if !(error is CancellationError) { logger.warning("Connecting to FCM failed", metadata: ["error": "\(error)"]) }
            let failure = error as? TransportError ?? .connectionFailed("\(error)")
            perform(pool.withLock { $0.connectionClosed(connectionID: plan.connectionID, endpoint: .sole, failure: failure) })
            return
        }
        logger.debug("Connected to FCM", metadata: ["fcm.max_concurrent_streams": "\(streamLimit)"])
        perform(pool.withLock { $0.connectionReady(connection, streamLimit: streamLimit) })
        await connection.runUntilClosed()
        perform(pool.withLock { $0.connectionClosed(connectionID: plan.connectionID, endpoint: .sole, failure: nil) })
        logger.debug("FCM connection closed")
    }

    private func connectionEvent(_ event: HTTP2ConnectionEvent, connectionID: Int) {
        let actions = pool.withLock { pool in
            switch event {
            case .streamLimitChanged(let limit):
                return pool.streamLimitChanged(connectionID: connectionID, endpoint: .sole, limit: limit)
            case .goingAway:
                return pool.connectionGoingAway(connectionID: connectionID, endpoint: .sole)
            case .closed(let failure):
                return pool.connectionClosed(connectionID: connectionID, endpoint: .sole, failure: failure)
            }
        }
        if case .goingAway(let code, let reason) = event {
            goAways.increment()
            logger.info("FCM sent GOAWAY; draining the connection", metadata: ["fcm.goaway_code": "\(code)", "fcm.goaway_reason": "\(reason ?? "none")"])
        }
        perform(actions)
    }

    /// Connections open (not draining) and the streams in use on them now.
    var usage: (connections: Int, streamsInUse: Int) {
        let snapshot = pool.withLock { $0.snapshot(.sole) }
        return (snapshot.liveConnections, snapshot.streamsInUse)
    }

    // MARK: Sending

    /// Sends `request` and returns FCM's answer. Throws ``TransportError`` when no answer
    /// arrived (``TransportError/reading(_:deadlinePassed:)`` reads it), or `CancellationError`.
    func send(_ request: FCMSendRequest, deadline: ContinuousClock.Instant, precedence: StreamPrecedence) async throws -> FCMSendAnswer {
        let remaining = ContinuousClock.now.duration(to: deadline)
        guard remaining > .zero else { throw TransportError.deadlineExceeded("the deadline passed before the request") }
        let nioDeadline = NIODeadline.now() + TimeAmount(remaining)
        var unprocessed = 0
        while true {
            let connection = try await leaseStream(deadline: nioDeadline, precedence: precedence)
            do {
                let answer = try await connection.execute(request, deadline: nioDeadline)
                release(connection, status: answer.status)
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

    /// A stream for each of up to `count` requests of `precedence`, as many as are free now (none
    /// while requests it must wait behind wait for one); each goes back with ``release(_:status:)``.
    func leaseFreeStreams(upTo count: Int, precedence: StreamPrecedence) -> [FCMConnection] {
        pool.withLock { $0.leaseFreeStreams(.sole, upTo: count, precedence: precedence, preferring: \.isOnCurrentEventLoop) }
    }

    private func leaseStream(deadline: NIODeadline, precedence: StreamPrecedence) async throws -> FCMConnection {
        switch pool.withLock({ $0.leaseIfAvailable(.sole, precedence: precedence) }) {
        case .leased(let connection): return connection
        case .failed(let error): throw error
        case .mustWait: break
        }
        let waiterID = waiterIDs.wrappingAdd(1, ordering: .relaxed).newValue
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { continuation in
                let waiter = Pool.Waiter(id: waiterID, recipient: .continuation(continuation), deadline: deadline, precedence: precedence)
                switch pool.withLock({ $0.enqueue(waiter, for: .sole) }) {
                case .leased(let connection):
                    continuation.resume(returning: connection)
                case .failed(let error):
                    continuation.resume(throwing: error)
                case .queued(let actions):
                    perform(actions)
                    // The cancellation handler may have run before the waiter was queued.
                    if Task.isCancelled { cancelWaiter(waiterID) }
                }
            }
        } onCancel: {
            self.cancelWaiter(waiterID)
        }
    }

    /// Queues the requests of a batch that found no free stream (``leaseFreeStreams(upTo:precedence:)``),
    /// in one lock section; returns their waiter IDs (for ``stopWaiting(_:)``).
    func wait(_ waiters: [PooledStreamWaiter<FCMConnection>], deadline: NIODeadline, precedence: StreamPrecedence) -> [UInt64] {
        let queued = waiters.map { waiter in
            Pool.Waiter(id: waiterIDs.wrappingAdd(1, ordering: .relaxed).newValue, recipient: waiter, deadline: deadline, precedence: precedence)
        }
        perform(pool.withLock { $0.enqueue(queued, for: .sole) })
        return queued.map(\.id)
    }

    /// Takes the waiters still queued out of the pool; each is told it gets no stream.
    func stopWaiting(_ ids: [UInt64]) {
        for id in ids { cancelWaiter(id) }
    }

    private func cancelWaiter(_ id: UInt64) {
        pool.withLock { $0.removeWaiter(id, for: .sole) }?.recipient.resume(throwing: CancellationError())
    }

    /// Gives a leased stream back; `status` is FCM's answer, nil when there was none.
    func release(_ connection: FCMConnection, status: Int?) {
        perform(pool.withLock { $0.release(connectionID: connection.id, endpoint: .sole, status: status) })
    }

    private func perform(_ actions: Pool.Actions) {
        for (waiter, connection) in actions.leases { waiter.recipient.resume(returning: connection) }
        for (waiter, error) in actions.failures { waiter.recipient.resume(throwing: error) }
        if let plan = actions.open, case .terminated = connectionPlanSink.yield(plan) {
            // run() has ended: report the plan as failed to keep the pool consistent.
            let failure = TransportError.shuttingDown("FCM client stopped")
            perform(pool.withLock { $0.connectionClosed(connectionID: plan.connectionID, endpoint: .sole, failure: failure) })
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
