import APNSCore
import Logging
public import Metrics
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import NIOSSL
import ServiceLifecycle
import Synchronization

/// Sends APNs requests over pooled HTTP/2 connections (``APNSConnectionHandler`` over swift-nio-ssl).
///
/// Add the client to a `ServiceGroup`: `run()` opens and owns the connections, and on graceful
/// shutdown or cancellation stops taking requests, lets in-flight ones finish for
/// ``APNSClientConfiguration/shutdownGracePeriod`` and closes every connection.
///
/// Connections open lazily, up to ``APNSClientConfiguration/connectionsPerEndpoint`` per endpoint
/// and credential, and each carries as many streams as the server's SETTINGS_MAX_CONCURRENT_STREAMS
/// allows (one until the first 200 with token authentication). Callers beyond that wait in a
/// bounded FIFO queue. A request whose bundle ID has an entry in
/// ``APNSClientConfiguration/credentialsByTopic`` uses that credential's own connections.
public final class APNSHTTP2Client: APNSClientProtocol, Service, Sendable {
    private let configuration: APNSClientConfiguration
    private let logger: Logger
    private let eventLoopGroup: any EventLoopGroup
    private typealias PoolStateMachine = APNSConnectionPoolStateMachine<
        APNSConnection, CheckedContinuation<APNSConnection, any Error>
    >

    /// The connections of one credential: its TLS identity or token source and its pool state.
    private struct CredentialPool: Sendable {
        let index: Int
        let factory: APNSConnection.Factory
        let state: NIOLockedValueBox<PoolStateMachine>
        /// Names the credential in logs (never key material).
        let name: String
    }

    /// A connection the pool of `credential` asked for.
    private struct PlannedConnection: Sendable {
        var credential: Int
        var plan: APNSConnectionPlan
    }

    /// Index 0 holds the default credential.
    private let pools: [CredentialPool]
    /// Bundle ID (or full apns-topic) to an index into `pools`; empty with one credential.
    private let poolIndexByTopic: [String: Int]
    private let connectionPlans: AsyncStream<PlannedConnection>
    private let connectionPlanSink: AsyncStream<PlannedConnection>.Continuation
    private let waiterIDs = Atomic<UInt64>(0)
    private let runState = NIOLockedValueBox(false)
    private let metrics: APNSClientMetrics

    /// Loads credentials and trust roots; throws ``APNSClientConfigurationError`` when they cannot
    /// be used. Connection metrics go to `metricsFactory` (swift-metrics' global one by default).
    public convenience init(
        configuration: APNSClientConfiguration,
        eventLoopGroup: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton,
        metricsFactory: any MetricsFactory = MetricsSystem.factory,
        logger: Logger
    ) throws {
        try self.init(
            configuration: configuration,
            eventLoopGroup: eventLoopGroup,
            metricsFactory: metricsFactory,
            logger: logger,
            makeTokenSource: nil
        )
    }

    /// `makeTokenSource`, when given, makes the default credential's token source, once per
    /// connection (tests inject scripted tokens); otherwise each token credential's connections
    /// get a ``ProviderTokenManager`` each.
    init(
        configuration: APNSClientConfiguration,
        eventLoopGroup: any EventLoopGroup,
        metricsFactory: any MetricsFactory = MetricsSystem.factory,
        logger: Logger,
        makeTokenSource: (@Sendable () -> any APNSProviderTokenSource)?
    ) throws {
        guard configuration.connectionsPerEndpoint >= 1 else {
            throw APNSClientConfigurationError("connectionsPerEndpoint must be at least 1")
        }
        let metrics = APNSClientMetrics(configuration: configuration, factory: metricsFactory)
        self.metrics = metrics
        self.configuration = configuration
        self.logger = logger
        self.eventLoopGroup = eventLoopGroup

        // One pool per distinct credential; topics naming the same credential share its pool.
        var credentials = [configuration.authentication]
        var indexByIdentity = [configuration.authentication.identity: 0]
        var poolIndexByTopic: [String: Int] = [:]
        for (topic, authentication) in configuration.credentialsByTopic.sorted(by: { $0.key < $1.key }) {
            if let index = indexByIdentity[authentication.identity] {
                poolIndexByTopic[topic] = index
            } else {
                indexByIdentity[authentication.identity] = credentials.count
                poolIndexByTopic[topic] = credentials.count
                credentials.append(authentication)
            }
        }
        self.poolIndexByTopic = poolIndexByTopic

        var pools: [CredentialPool] = []
        for (index, authentication) in credentials.enumerated() {
            var tokenSource: (@Sendable () -> any APNSProviderTokenSource)?
            if index == 0, let makeTokenSource {
                tokenSource = { CountingTokenSource(makeTokenSource(), counting: metrics.providerTokens) }
            } else if case .token(let credentials) = authentication.backing {
                tokenSource = {
                    CountingTokenSource(ProviderTokenManager(credentials: credentials, clock: ContinuousClock()), counting: metrics.providerTokens)
                }
            }
            let factory = APNSConnection.Factory(
                eventLoopGroup: eventLoopGroup,
                sslContext: try Self.makeSSLContext(configuration, authentication: authentication),
                makeTokenSource: tokenSource,
                connectTimeout: configuration.connectTimeout,
                pingInterval: configuration.pingInterval,
                pingTimeout: configuration.pingTimeout
            )
            let state = PoolStateMachine(
                connectionsPerEndpoint: configuration.connectionsPerEndpoint,
                maximumWaiters: configuration.maximumQueuedRequests,
                requiresVerification: authentication.usesProviderTokens
            )
            pools.append(
                CredentialPool(
                    index: index,
                    factory: factory,
                    state: NIOLockedValueBox(state),
                    name: index == 0 ? "default" : authentication.description
                )
            )
        }
        self.pools = pools
        (self.connectionPlans, self.connectionPlanSink) = AsyncStream.makeStream(of: PlannedConnection.self)
    }

    // MARK: Service

    /// Opens connections as the pool asks for them and keeps them until shutdown. Call once;
    /// requests sent before `run()` starts wait for it (up to their deadlines).
    public func run() async throws {
        let isFirstRun = runState.withLockedValue { hasRun in
            defer { hasRun = true }
            return !hasRun
        }
        guard isFirstRun else {
            throw APNSClientConfigurationError("APNSHTTP2Client.run() must be called only once")
        }
        for pool in pools { _ = pool.state.withLockedValue { $0.startRunning() } }
        logger.debug("APNs client started")
        await withGracefulShutdownHandler {
            await withDiscardingTaskGroup { group in
                for await planned in connectionPlans {
                    let pool = pools[planned.credential]
                    group.addTask { await self.runConnection(planned.plan, pool: pool) }
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
        connectionPlanSink.finish()
        for pool in pools {
            let (waiters, connections, timer) = pool.state.withLockedValue { $0.shutDown() }
            timer?.cancel()
            for waiter in waiters {
                waiter.continuation.resume(throwing: APNSTransportError.shuttingDown("APNs client is shutting down"))
            }
            for connection in connections {
                connection.closeGracefully(within: configuration.shutdownGracePeriod)
            }
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
        let pool = pools[poolIndex(for: request)]
        let first = try await sendOnce(request, environment: environment, deadline: deadline, pool: pool)
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
        return try await sendOnce(request, environment: environment, deadline: deadline, pool: pool).outcome.response
    }

    /// The pool for the request's credential: the bundle ID's (or the full topic's) entry in
    /// ``APNSClientConfiguration/credentialsByTopic``, else the default.
    private func poolIndex(for request: APNSRequest) -> Int {
        guard !poolIndexByTopic.isEmpty else { return 0 }
        let bundleID = request.bundleID
        if let index = poolIndexByTopic[String(bundleID)] { return index }
        if bundleID.utf8.count != request.topic.utf8.count, let index = poolIndexByTopic[request.topic] {
            return index
        }
        return 0
    }

    private func sendOnce(
        _ request: APNSRequest,
        environment: APNSEnvironment,
        deadline: ContinuousClock.Instant,
        pool: CredentialPool
    ) async throws -> (outcome: APNSStreamOutcome, connection: APNSConnection) {
        guard let nioDeadline = NIODeadline.fromContinuousClock(deadline) else {
            throw APNSTransportError.deadlineExceeded("the deadline passed before the request was sent")
        }
        var unopenedStreams = 0
        while true {
            let connection = try await leaseStream(environment: environment, deadline: nioDeadline, pool: pool)
            let outcome: APNSStreamOutcome
            do {
                outcome = try await connection.execute(request, deadline: nioDeadline)
            } catch let notOpened as APNSStreamNotOpened {
                // Never written (the connection closed or started draining after the lease): the
                // pool already knows, so the next lease picks another connection.
                releaseStream(on: connection, status: nil, pool: pool)
                unopenedStreams += 1
                if unopenedStreams >= Self.maximumUnopenedStreamRetries { throw notOpened.transportError }
                continue
            } catch {
                releaseStream(on: connection, status: nil, pool: pool)
                throw error
            }
            releaseStream(on: connection, status: outcome.response.status, pool: pool)
            return (outcome, connection)
        }
    }

    /// How often a request whose stream could not be opened is moved to another connection.
    private static let maximumUnopenedStreamRetries = 3

    // MARK: Stream leases

    private func leaseStream(
        environment: APNSEnvironment,
        deadline: NIODeadline,
        pool: CredentialPool
    ) async throws -> APNSConnection {
        switch pool.state.withLockedValue({ $0.leaseIfAvailable(environment) }) {
        case .leased(let connection): return connection
        case .failed(let error): throw error
        case .mustWait: break
        }

        let waiterID = waiterIDs.wrappingAdd(1, ordering: .relaxed).newValue
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { continuation in
                let waiter = PoolStateMachine.Waiter(id: waiterID, continuation: continuation, deadline: deadline)
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

    private func cancelWaiter(_ id: UInt64, environment: APNSEnvironment, pool: CredentialPool) {
        guard let waiter = pool.state.withLockedValue({ $0.removeWaiter(id, for: environment) }) else { return }
        waiter.continuation.resume(throwing: CancellationError())
    }

    private func waiterTimerFired(_ deadline: NIODeadline, pool: CredentialPool) {
        perform(pool.state.withLockedValue { $0.waiterTimerFired(timerDeadline: deadline, now: .now()) }, pool: pool)
    }

    private func releaseStream(on connection: APNSConnection, status: Int?, pool: CredentialPool) {
        let actions = pool.state.withLockedValue {
            $0.release(connectionID: connection.id, environment: connection.environment, status: status)
        }
        perform(actions, pool: pool)
    }

    private func perform(_ actions: PoolStateMachine.Actions, pool: CredentialPool) {
        for (waiter, connection) in actions.leases {
            waiter.continuation.resume(returning: connection)
        }
        for (waiter, error) in actions.failures {
            waiter.continuation.resume(throwing: error)
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
        let index = topic.flatMap { poolIndexByTopic[$0] } ?? 0
        return pools[index].state.withLockedValue { $0.snapshot(environment) }
    }

    /// Records the connections open and the streams in use per endpoint, over every credential's
    /// pool (`herald_apns_connections`, `herald_apns_streams_in_use`).
    public func recordPoolState() {
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
    var credentialCount: Int { pools.count }

    /// Whether every configured endpoint (production and sandbox) can be reached now: a
    /// connection to it is open, or a TCP connection to it opens within `timeout`.
    ///
    /// The probe only opens (and at once closes) a plain TCP connection, no TLS and no provider
    /// token, and only while no APNs connection to that endpoint is open, so a busy client never
    /// probes and an idle one touches APNs once per readiness check at most.
    public func canReachEndpoints(timeout: Duration = .seconds(2)) async -> Bool {
        for environment in [APNSEnvironment.production, .sandbox] {
            if pools.contains(where: { $0.state.withLockedValue { $0.snapshot(environment) }.liveConnections > 0 }) {
                continue
            }
            let endpoint = configuration.endpoint(for: environment)
            do {
                let channel = try await ClientBootstrap(group: eventLoopGroup)
                    .connectTimeout(TimeAmount(timeout))
                    .connect(host: endpoint.host, port: endpoint.port)
                    .get()
                try? await channel.close()
            } catch {
                logger.debug("APNs endpoint unreachable", metadata: [APNSLoggingKeys.endpoint: "\(endpoint)", APNSLoggingKeys.error: "\(error)"])
                return false
            }
        }
        return true
    }

    // MARK: Connections

    private func requestConnection(_ plan: APNSConnectionPlan, pool: CredentialPool) {
        if case .terminated = connectionPlanSink.yield(PlannedConnection(credential: pool.index, plan: plan)) {
            // run() has ended: the pool is shut down, so report the plan as failed to keep it consistent.
            perform(
                pool.state.withLockedValue {
                    $0.connectionClosed(
                        connectionID: plan.connectionID,
                        environment: plan.environment,
                        failure: .shuttingDown("client stopped")
                    )
                },
                pool: pool
            )
        }
    }

    /// One connection's life: backoff, connect, serve until closed, report.
    private func runConnection(_ plan: APNSConnectionPlan, pool: CredentialPool) async {
        let endpoint = configuration.endpoint(for: plan.environment)
        var logger = self.logger
        logger[metadataKey: APNSLoggingKeys.connectionID] = "\(plan.connectionID)"
        logger[metadataKey: APNSLoggingKeys.endpoint] = "\(endpoint)"
        if pools.count > 1 { logger[metadataKey: APNSLoggingKeys.credential] = "\(pool.name)" }

        let connection: APNSConnection
        let streamLimit: Int
        do {
            let factory = pool.factory
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
                        self?.connectionEvent(
                            event,
                            connectionID: plan.connectionID,
                            environment: plan.environment,
                            pool: pool
                        )
                    }
                )
            }
        } catch {
            if !(error is CancellationError) {
                logger.warning("Connecting to APNs failed", metadata: [APNSLoggingKeys.error: "\(error)"])
                metrics.recordConnectionFailure(plan.environment)
            }
            perform(
                pool.state.withLockedValue {
                    $0.connectionClosed(
                        connectionID: plan.connectionID,
                        environment: plan.environment,
                        failure: error as? APNSTransportError ?? .connectionFailed("\(error)")
                    )
                },
                pool: pool
            )
            return
        }

        logger.info(
            "Connected to APNs",
            metadata: [APNSLoggingKeys.maxConcurrentStreams: "\(streamLimit)"]
        )
        perform(pool.state.withLockedValue { $0.connectionReady(connection, streamLimit: streamLimit) }, pool: pool)
        await connection.runUntilClosed()
        perform(
            pool.state.withLockedValue {
                $0.connectionClosed(connectionID: plan.connectionID, environment: plan.environment, failure: nil)
            },
            pool: pool
        )
        logger.info("APNs connection closed")
    }

    private func connectionEvent(
        _ event: APNSConnectionEvent,
        connectionID: Int,
        environment: APNSEnvironment,
        pool: CredentialPool
    ) {
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
            actions = pool.state.withLockedValue {
                $0.streamLimitChanged(connectionID: connectionID, environment: environment, limit: limit)
            }
        case .goingAway(let errorCode, let reason):
            metrics.recordGoAway(environment)
            logger.warning(
                "APNs sent GOAWAY; draining the connection",
                metadata: [
                    APNSLoggingKeys.connectionID: "\(connectionID)",
                    APNSLoggingKeys.goAwayErrorCode: "\(errorCode)",
                    APNSLoggingKeys.goAwayReason: "\(reason ?? "none")",
                ]
            )
            actions = pool.state.withLockedValue {
                $0.connectionGoingAway(connectionID: connectionID, environment: environment)
            }
        case .closed(let failure):
            actions = pool.state.withLockedValue {
                $0.connectionClosed(connectionID: connectionID, environment: environment, failure: failure)
            }
        }
        perform(actions, pool: pool)
    }

    // MARK: TLS

    private static func makeSSLContext(
        _ configuration: APNSClientConfiguration,
        authentication: APNSClientConfiguration.Authentication
    ) throws -> NIOSSLContext {
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
        switch authentication.backing {
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
    static let credential = "apns.credential"
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
