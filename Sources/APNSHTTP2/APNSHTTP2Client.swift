public import APNSCore
import PushCore
import Crypto
import Foundation
public import Logging
public import Metrics
import NIOConcurrencyHelpers
public import NIOCore
public import NIOPosix
import NIOSSL
public import ServiceLifecycle
import Synchronization
import APNSWire
import HTTP2Transport

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
/// ``APNSClientConfiguration/credentialsByTopic`` uses that credential's own connections;
/// ``replaceCredentials(default:byTopic:)`` swaps credentials while the client runs.
public final class APNSHTTP2Client: APNSClientProtocol, Service, Sendable {
    let configuration: APNSClientConfiguration
    let logger: Logger
    let eventLoopGroup: any EventLoopGroup
    typealias PoolStateMachine = HTTP2ConnectionPoolStateMachine<APNSConnection, PooledStreamWaiter<APNSConnection>>

    /// The connections of one credential: its TLS identity or token source and its pool state.
    final class CredentialPool: Sendable {
        let factory: APNSConnection.Factory
        let state: NIOLockedValueBox<PoolStateMachine>
        /// Names the credential in logs (never key material).
        let name: String
        private let retired = Atomic(false)

        init(factory: APNSConnection.Factory, state: PoolStateMachine, name: String) {
            self.factory = factory
            self.state = NIOLockedValueBox(state)
            self.name = name
        }

        /// True once the credential was replaced or removed: the pool takes no new requests, and
        /// requests that waited in it move to the routing's current pool.
        var isRetired: Bool { retired.load(ordering: .acquiring) }

        func retire() { retired.store(true, ordering: .releasing) }
    }

    /// A connection the pool of `credential` asked for.
    struct PlannedConnection: Sendable {
        var pool: CredentialPool
        var plan: HTTP2ConnectionPlan<APNSEnvironment>
    }

    /// Which pool serves which request, replaced as a whole when credentials change.
    struct Routing: Sendable {
        /// The pool for topics without an entry; nil when only listed topics are served.
        var defaultPool: CredentialPool?
        /// Bundle ID (or full apns-topic) to its credential's pool.
        var poolsByTopic: [String: CredentialPool] = [:]
        /// Every pool in use, by credential identity (see ``APNSHTTP2Client/identity(of:)``).
        var poolsByIdentity: [String: CredentialPool] = [:]

        /// Whether `other` sends every topic to the same pools.
        func routesTheSame(as other: Routing) -> Bool {
            defaultPool === other.defaultPool
                && poolsByTopic.count == other.poolsByTopic.count
                && poolsByTopic.allSatisfy { other.poolsByTopic[$0.key] === $0.value }
        }
    }

    enum Phase {
        case notStarted
        case running
        case stopped
    }

    let routing: NIOLockedValueBox<(routing: Routing, phase: Phase)>
    /// Held through a whole ``replaceCredentials(default:byTopic:)``: a replacement builds on the
    /// pools in use when it starts, so two at once could revive a pool the other retired.
    let replacing = NIOLock()
    let connectionPlans: AsyncStream<PlannedConnection>
    let connectionPlanSink: AsyncStream<PlannedConnection>.Continuation
    let waiterIDs = Atomic<UInt64>(0)
    let metrics: APNSClientMetrics

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
        self.metrics = APNSClientMetrics(configuration: configuration, factory: metricsFactory)
        self.configuration = configuration
        self.logger = logger
        self.eventLoopGroup = eventLoopGroup
        (self.connectionPlans, self.connectionPlanSink) = AsyncStream.makeStream(of: PlannedConnection.self)
        let routing = try Self.makeRouting(
            default: configuration.authentication,
            byTopic: configuration.credentialsByTopic,
            reusing: [:],
            configuration: configuration,
            eventLoopGroup: eventLoopGroup,
            metrics: metrics,
            makeDefaultTokenSource: makeTokenSource
        )
        self.routing = NIOLockedValueBox((routing, .notStarted))
    }

    // MARK: Service

    /// Opens connections as the pool asks for them and keeps them until shutdown. Call once;
    /// requests sent before `run()` starts wait for it (up to their deadlines).
    public func run() async throws {
        let isFirstRun = routing.withLockedValue { state in
            guard state.phase == .notStarted else { return false }
            state.phase = .running
            return true
        }
        guard isFirstRun else {
            throw APNSClientConfigurationError("APNSHTTP2Client.run() must be called only once")
        }
        logger.debug("APNs client started")
        await withGracefulShutdownHandler {
            await withDiscardingTaskGroup { group in
                for await planned in connectionPlans {
                    group.addTask { await self.runConnection(planned.plan, pool: planned.pool) }
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
        let pools = routing.withLockedValue { state in
            state.phase = .stopped
            return state.routing.poolsByIdentity.values
        }
        for pool in pools { stop(pool, because: "APNs client is shutting down") }
    }

    // MARK: Sending

    /// Sends one request and returns APNs' answer.
    ///
    /// Throws ``TransportError`` when no answer arrived: `deadlineExceeded` when `deadline`
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
        guard Self.tokenExpired(first.outcome, on: first.connection) else { return first.outcome.response }
        return try await sendAgain(request, environment: environment, deadline: deadline, afterExpired: first)
    }

    /// Whether APNs refused the request's provider token as expired (403 ExpiredProviderToken),
    /// so ``sendAgain(_:environment:deadline:afterExpired:)`` may retry it with a new one.
    static func tokenExpired(_ outcome: APNSStreamOutcome, on connection: APNSConnection) -> Bool {
        outcome.response.status == 403 && outcome.response.reason == .expiredProviderToken
            && outcome.providerToken != nil && connection.tokenManager != nil
    }

    /// After a 403 ExpiredProviderToken: sends `request` once more with a new token when Apple's
    /// 20-minute rule allows one, else returns the first answer.
    func sendAgain(
        _ request: APNSRequest,
        environment: APNSEnvironment,
        deadline: ContinuousClock.Instant,
        afterExpired first: (outcome: APNSStreamOutcome, connection: APNSConnection)
    ) async throws -> APNSResponse {
        guard let usedToken = first.outcome.providerToken, let manager = first.connection.tokenManager else {
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

    /// The pool for the request's credential: the bundle ID's entry (the full topic's, when it
    /// has one, wins), else the default; throws ``APNSNoCredentialError`` when there is none and
    /// ``APNSTokenAuthenticationRequiredError`` for a channel request with a certificate credential.
    func pool(for request: APNSRequest) throws -> CredentialPool {
        let pool = routing.withLockedValue { state -> CredentialPool? in
            let routing = state.routing
            guard !routing.poolsByTopic.isEmpty else { return routing.defaultPool }
            let bundleID = request.bundleID
            if bundleID.utf8.count != request.topic.utf8.count, let pool = routing.poolsByTopic[request.topic] {
                return pool
            }
            return routing.poolsByTopic[String(bundleID)] ?? routing.defaultPool
        }
        guard let pool else { throw APNSNoCredentialError(topic: request.topic) }
        if request.isChannelRequest, pool.factory.makeTokenSource == nil {
            throw APNSTokenAuthenticationRequiredError(topic: request.topic)
        }
        return pool
    }

    private func sendOnce(
        _ request: APNSRequest,
        environment: APNSEnvironment,
        deadline: ContinuousClock.Instant
    ) async throws -> (outcome: APNSStreamOutcome, connection: APNSConnection) {
        guard let nioDeadline = NIODeadline.fromContinuousClock(deadline) else {
            throw TransportError.deadlineExceeded("the deadline passed before the request was sent")
        }
        var pool = try pool(for: request)
        var unopenedStreams = 0
        while true {
            let connection: APNSConnection
            do {
                connection = try await leaseStream(environment: environment, deadline: nioDeadline, precedence: request.precedence, pool: pool)
            } catch let error as TransportError where error.isShuttingDown && pool.isRetired {
                // The credential was replaced before this request got a stream: nothing was
                // sent, so it moves to the current credential without counting an attempt.
                pool = try self.pool(for: request)
                continue
            }
            let outcome: APNSStreamOutcome
            do {
                outcome = try await connection.execute(request, deadline: nioDeadline)
            } catch let notOpened as HTTP2StreamNotOpened {
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
}
