import APNSCore
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import NIOSSL
import ServiceLifecycle
import Synchronization

/// Sends APNs requests over pooled HTTP/2 connections (swift-nio-http2 over TLS).
///
/// Add the client to a `ServiceGroup`: `run()` opens and owns the connections, and on graceful
/// shutdown or cancellation stops taking requests, lets in-flight ones finish for
/// ``APNSClientConfiguration/shutdownGracePeriod`` and closes every connection.
///
/// Connections open lazily, up to ``APNSClientConfiguration/connectionsPerEndpoint`` per endpoint,
/// and each carries as many streams as the server's SETTINGS_MAX_CONCURRENT_STREAMS allows (one
/// until the first 200 with token authentication). Callers beyond that wait in a bounded FIFO queue.
public final class APNSHTTP2Client: APNSClientProtocol, Service, Sendable {
    private let configuration: APNSClientConfiguration
    private let logger: Logger
    private let factory: APNSConnection.Factory
    private let eventLoopGroup: any EventLoopGroup
    private typealias PoolStateMachine = APNSConnectionPoolStateMachine<
        APNSConnection, CheckedContinuation<APNSConnection, any Error>
    >

    private let pool: NIOLockedValueBox<PoolStateMachine>
    private let connectionPlans: AsyncStream<APNSConnectionPlan>
    private let connectionPlanSink: AsyncStream<APNSConnectionPlan>.Continuation
    private let waiterIDs = Atomic<UInt64>(0)

    /// Loads credentials and trust roots; throws ``APNSClientConfigurationError`` when they cannot be used.
    public convenience init(
        configuration: APNSClientConfiguration,
        eventLoopGroup: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton,
        logger: Logger
    ) throws {
        var makeTokenSource: (@Sendable () -> any APNSProviderTokenSource)?
        if case .token(let credentials) = configuration.authentication.backing {
            makeTokenSource = { ProviderTokenManager(credentials: credentials, clock: ContinuousClock()) }
        }
        try self.init(
            configuration: configuration,
            eventLoopGroup: eventLoopGroup,
            logger: logger,
            makeTokenSource: makeTokenSource
        )
    }

    /// `makeTokenSource` is called once per connection (tests inject scripted tokens).
    init(
        configuration: APNSClientConfiguration,
        eventLoopGroup: any EventLoopGroup,
        logger: Logger,
        makeTokenSource: (@Sendable () -> any APNSProviderTokenSource)?
    ) throws {
        guard configuration.connectionsPerEndpoint >= 1 else {
            throw APNSClientConfigurationError("connectionsPerEndpoint must be at least 1")
        }
        self.configuration = configuration
        self.logger = logger
        self.eventLoopGroup = eventLoopGroup

        self.factory = APNSConnection.Factory(
            eventLoopGroup: eventLoopGroup,
            sslContext: try Self.makeSSLContext(configuration),
            makeTokenSource: makeTokenSource,
            connectTimeout: configuration.connectTimeout,
            pingInterval: configuration.pingInterval,
            pingTimeout: configuration.pingTimeout
        )
        self.pool = NIOLockedValueBox(
            PoolStateMachine(
                connectionsPerEndpoint: configuration.connectionsPerEndpoint,
                maximumWaiters: configuration.maximumQueuedRequests,
                requiresVerification: configuration.authentication.usesProviderTokens
            )
        )
        (self.connectionPlans, self.connectionPlanSink) = AsyncStream.makeStream(of: APNSConnectionPlan.self)
    }

    // MARK: Service

    /// Opens connections as the pool asks for them and keeps them until shutdown. Call once;
    /// requests sent before `run()` starts wait for it (up to their deadlines).
    public func run() async throws {
        guard pool.withLockedValue({ $0.startRunning() }) else {
            throw APNSClientConfigurationError("APNSHTTP2Client.run() must be called only once")
        }
        logger.debug("APNs client started")
        await withGracefulShutdownHandler {
            await withDiscardingTaskGroup { group in
                for await plan in connectionPlans {
                    group.addTask { await self.runConnection(plan) }
                }
                // The plan stream ends on graceful shutdown or when this task is cancelled; in the
                // latter case the group's children are cancelled too and close their channels.
                self.shutDown()
            }
        } onGracefulShutdown: {
            self.shutDown()
        }
        logger.debug("APNs client stopped")
    }

    /// Stops taking requests, fails queued ones and closes connections once in-flight streams finished.
    private func shutDown() {
        let (waiters, connections, timer) = pool.withLockedValue { $0.shutDown() }
        connectionPlanSink.finish()
        timer?.cancel()
        for waiter in waiters {
            waiter.continuation.resume(throwing: APNSTransportError.shuttingDown("APNs client is shutting down"))
        }
        for connection in connections {
            connection.closeGracefully(within: configuration.shutdownGracePeriod)
        }
    }

    // MARK: Sending

    /// Sends one request and returns APNs' answer.
    ///
    /// Throws ``APNSTransportError`` when no answer arrived: `deadlineExceeded` when `deadline`
    /// passed (the stream is reset), `streamReset` when APNs reset or refused the stream (for
    /// example above a GOAWAY's last stream ID), `connectionFailed`, `overloaded` when too many
    /// requests wait for a stream, `shuttingDown`. A 403 ExpiredProviderToken is retried once with
    /// a new token when Apple's 20-minute rule allows one.
    public func send(
        _ request: APNSRequest,
        environment: APNSEnvironment,
        deadline: ContinuousClock.Instant
    ) async throws -> APNSResponse {
        let first = try await sendOnce(request, environment: environment, deadline: deadline)
        guard first.outcome.response.status == 403, first.outcome.response.reason == .expiredProviderToken,
            let usedToken = first.outcome.providerToken, let manager = first.connection.tokenManager
        else {
            return first.outcome.response
        }
        let replaced: Bool
        do {
            replaced = try await manager.replaceExpired(usedToken)
            if replaced { first.connection.installProviderToken(try await manager.currentToken()) }
        } catch {
            logger.error("Signing an APNs provider token failed", metadata: [APNSLoggingKeys.error: "\(error)"])
            return first.outcome.response
        }
        guard replaced else { return first.outcome.response }
        logger.info("APNs provider token expired; retrying with a new token")
        return try await sendOnce(request, environment: environment, deadline: deadline).outcome.response
    }

    private func sendOnce(
        _ request: APNSRequest,
        environment: APNSEnvironment,
        deadline: ContinuousClock.Instant
    ) async throws -> (outcome: APNSStreamOutcome, connection: APNSConnection) {
        guard let nioDeadline = NIODeadline.fromContinuousClock(deadline) else {
            throw APNSTransportError.deadlineExceeded("the deadline passed before the request was sent")
        }
        var unopenedStreams = 0
        while true {
            let connection = try await leaseStream(environment: environment, deadline: nioDeadline)
            let outcome: APNSStreamOutcome
            do {
                outcome = try await connection.execute(request, deadline: nioDeadline)
            } catch let notOpened as APNSStreamNotOpened {
                // Never written (the connection closed or started draining after the lease): the
                // pool already knows, so the next lease picks another connection.
                releaseStream(on: connection, status: nil)
                unopenedStreams += 1
                if unopenedStreams >= Self.maximumUnopenedStreamRetries { throw notOpened.transportError }
                continue
            } catch {
                releaseStream(on: connection, status: nil)
                throw error
            }
            releaseStream(on: connection, status: outcome.response.status)
            return (outcome, connection)
        }
    }

    /// How often a request whose stream could not be opened is moved to another connection.
    private static let maximumUnopenedStreamRetries = 3

    // MARK: Stream leases

    private func leaseStream(environment: APNSEnvironment, deadline: NIODeadline) async throws -> APNSConnection {
        switch pool.withLockedValue({ $0.leaseIfAvailable(environment) }) {
        case .leased(let connection): return connection
        case .failed(let error): throw error
        case .mustWait: break
        }

        let waiterID = waiterIDs.wrappingAdd(1, ordering: .relaxed).newValue
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { continuation in
                let waiter = PoolStateMachine.Waiter(id: waiterID, continuation: continuation, deadline: deadline)
                switch pool.withLockedValue({ $0.enqueue(waiter, for: environment) }) {
                case .leased(let connection):
                    continuation.resume(returning: connection)
                case .failed(let error):
                    continuation.resume(throwing: error)
                case .queued(let actions):
                    perform(actions)
                    if Task.isCancelled {
                        // The cancellation handler may have run before the waiter was queued.
                        cancelWaiter(waiterID, environment: environment)
                    }
                }
            }
        } onCancel: {
            self.cancelWaiter(waiterID, environment: environment)
        }
    }

    private func cancelWaiter(_ id: UInt64, environment: APNSEnvironment) {
        guard let waiter = pool.withLockedValue({ $0.removeWaiter(id, for: environment) }) else { return }
        waiter.continuation.resume(throwing: CancellationError())
    }

    private func waiterTimerFired(_ deadline: NIODeadline) {
        perform(pool.withLockedValue { $0.waiterTimerFired(timerDeadline: deadline, now: .now()) })
    }

    private func releaseStream(on connection: APNSConnection, status: Int?) {
        let actions = pool.withLockedValue {
            $0.release(connectionID: connection.id, environment: connection.environment, status: status)
        }
        perform(actions)
    }

    private func perform(_ actions: PoolStateMachine.Actions) {
        for (waiter, connection) in actions.leases {
            waiter.continuation.resume(returning: connection)
        }
        for (waiter, error) in actions.failures {
            waiter.continuation.resume(throwing: error)
        }
        if let plan = actions.open { requestConnection(plan) }
        for connection in actions.close { connection.close() }
        actions.cancelWaiterTimer?.cancel()
        if let deadline = actions.armWaiterTimer {
            let timer = eventLoopGroup.any().scheduleTask(deadline: deadline) { self.waiterTimerFired(deadline) }
            if !pool.withLockedValue({ $0.attachWaiterTimer(timer, deadline: deadline) }) { timer.cancel() }
        }
    }

    /// Live connections to `environment`'s endpoint and the most streams one carried at once.
    func poolSnapshot(_ environment: APNSEnvironment) -> (liveConnections: Int, peakStreamsPerConnection: Int) {
        pool.withLockedValue { $0.snapshot(environment) }
    }

    // MARK: Connections

    private func requestConnection(_ plan: APNSConnectionPlan) {
        if case .terminated = connectionPlanSink.yield(plan) {
            // run() has ended: the pool is shut down, so report the plan as failed to keep it consistent.
            perform(
                pool.withLockedValue {
                    $0.connectionClosed(
                        connectionID: plan.connectionID,
                        environment: plan.environment,
                        failure: "client stopped"
                    )
                }
            )
        }
    }

    /// One connection's life: backoff, connect, serve until closed, report.
    private func runConnection(_ plan: APNSConnectionPlan) async {
        let endpoint = configuration.endpoint(for: plan.environment)
        var logger = self.logger
        logger[metadataKey: APNSLoggingKeys.connectionID] = "\(plan.connectionID)"
        logger[metadataKey: APNSLoggingKeys.endpoint] = "\(endpoint)"

        let connection: APNSConnection
        let streamLimit: Int
        do {
            let factory = self.factory
            let loggerForConnection = logger
            (connection, streamLimit) = try await cancelWhenGracefulShutdown {
                if plan.delay > .zero {
                    try await Task.sleep(for: plan.delay * Double.random(in: 0.5...1.0))
                }
                return try await factory.connect(
                    id: plan.connectionID,
                    environment: plan.environment,
                    endpoint: endpoint,
                    logger: loggerForConnection,
                    onEvent: { [weak self] event in
                        self?.connectionEvent(event, connectionID: plan.connectionID, environment: plan.environment)
                    }
                )
            }
        } catch {
            if !(error is CancellationError) {
                logger.warning("Connecting to APNs failed", metadata: [APNSLoggingKeys.error: "\(error)"])
            }
            perform(
                pool.withLockedValue {
                    $0.connectionClosed(
                        connectionID: plan.connectionID,
                        environment: plan.environment,
                        failure: "\(error)"
                    )
                }
            )
            return
        }

        logger.info(
            "Connected to APNs",
            metadata: [APNSLoggingKeys.maxConcurrentStreams: "\(streamLimit)"]
        )
        perform(pool.withLockedValue { $0.connectionReady(connection, streamLimit: streamLimit) })
        await connection.runUntilClosed()
        perform(
            pool.withLockedValue {
                $0.connectionClosed(connectionID: plan.connectionID, environment: plan.environment, failure: nil)
            }
        )
        logger.info("APNs connection closed")
    }

    private func connectionEvent(_ event: APNSConnectionEvent, connectionID: Int, environment: APNSEnvironment) {
        let actions: PoolStateMachine.Actions
        switch event {
        case .streamLimitChanged(let limit):
            logger.debug(
                "APNs changed the stream limit",
                metadata: [
                    APNSLoggingKeys.connectionID: "\(connectionID)",
                    APNSLoggingKeys.maxConcurrentStreams: "\(limit)",
                ]
            )
            actions = pool.withLockedValue {
                $0.streamLimitChanged(connectionID: connectionID, environment: environment, limit: limit)
            }
        case .goingAway(let errorCode, let reason):
            logger.warning(
                "APNs sent GOAWAY; draining the connection",
                metadata: [
                    APNSLoggingKeys.connectionID: "\(connectionID)",
                    APNSLoggingKeys.goAwayErrorCode: "\(errorCode)",
                    APNSLoggingKeys.goAwayReason: "\(reason ?? "none")",
                ]
            )
            actions = pool.withLockedValue {
                $0.connectionGoingAway(connectionID: connectionID, environment: environment)
            }
        case .closed:
            actions = pool.withLockedValue {
                $0.connectionClosed(connectionID: connectionID, environment: environment, failure: nil)
            }
        }
        perform(actions)
    }

    // MARK: TLS

    private static func makeSSLContext(_ configuration: APNSClientConfiguration) throws -> NIOSSLContext {
        var tls = TLSConfiguration.makeClientConfiguration()
        tls.applicationProtocols = ["h2"]
        tls.minimumTLSVersion = .tlsv12
        tls.certificateVerification = .fullVerification
        if let caPath = configuration.additionalTrustRootsPEMPath {
            do {
                let certificates = try NIOSSLCertificate.fromPEMFile(caPath)
                guard !certificates.isEmpty else {
                    throw APNSClientConfigurationError("no certificate in the CA file \(caPath)")
                }
                tls.additionalTrustRoots = [.certificates(certificates)]
            } catch let error as APNSClientConfigurationError {
                throw error
            } catch {
                throw APNSClientConfigurationError("cannot read the CA file \(caPath): \(error)")
            }
        }
        switch configuration.authentication.backing {
        case .token:
            break
        case .pkcs12(let path, let password):
            do {
                let bundle = try NIOSSLPKCS12Bundle(file: path, passphrase: password.map { Array($0.utf8) })
                tls.certificateChain = bundle.certificateChain.map { .certificate($0) }
                tls.privateKey = .privateKey(bundle.privateKey)
            } catch {
                // The error names the file, never the password.
                throw APNSClientConfigurationError("cannot load the PKCS#12 certificate \(path): \(error)")
            }
        case .pem(let certificatePath, let privateKeyPath):
            do {
                tls.certificateChain = try NIOSSLCertificate.fromPEMFile(certificatePath).map { .certificate($0) }
                tls.privateKey = .privateKey(try NIOSSLPrivateKey(file: privateKeyPath, format: .pem))
            } catch {
                throw APNSClientConfigurationError(
                    "cannot load the PEM certificate \(certificatePath) or key \(privateKeyPath): \(error)"
                )
            }
        }
        do {
            return try NIOSSLContext(configuration: tls)
        } catch {
            throw APNSClientConfigurationError("invalid TLS configuration: \(error)")
        }
    }
}

/// Logger metadata keys used by the APNs transport.
enum APNSLoggingKeys {
    static let connectionID = "apns.connection.id"
    static let endpoint = "apns.endpoint"
    static let maxConcurrentStreams = "apns.max_concurrent_streams"
    static let goAwayErrorCode = "apns.goaway.error_code"
    static let goAwayReason = "apns.goaway.reason"
    static let error = "error"
}

extension NIODeadline {
    /// The NIO deadline for a `ContinuousClock` instant, or nil when it already passed.
    static func fromContinuousClock(_ instant: ContinuousClock.Instant) -> NIODeadline? {
        let remaining = ContinuousClock.now.duration(to: instant)
        guard remaining > .zero else { return nil }
        let (seconds, attoseconds) = remaining.components
        // Anything beyond ten years is "no deadline" for practical purposes; avoids overflow.
        let nanoseconds = min(seconds, 315_360_000) * 1_000_000_000 + attoseconds / 1_000_000_000
        return .now() + .nanoseconds(nanoseconds)
    }
}
