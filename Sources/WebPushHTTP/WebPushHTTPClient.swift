// WebPushHTTPClient.swift: the Web Push sender (RFC 8030, 8291, 8292) on Herald's shared HTTP/2
// transport: checks a subscription's host, signs with the app's VAPID key, encrypts, sends.

import HTTP2TLS
import PushCore
public import WebPushCore
public import Logging
public import Metrics
import NIOCore
import NIOPosix
public import ServiceLifecycle
import Synchronization
import HTTP2Transport

/// Sends Web Push messages to browsers' push services over HTTP/2 (``WebPushHTTP2Transport``:
/// APNs' and FCM's frame code and pool, with connections of its own for each push-service
/// origin, opened as messages need them).
///
/// Every request has a deadline. An endpoint whose host the configured allow-list does not
/// allow, or a message no VAPID key serves, fails before any connection is opened. Each attempt
/// is encrypted anew (a fresh key pair and salt). ``run()`` runs the connections and, when it
/// ends, shuts them down: run it (in a `ServiceGroup`) for as long as messages are sent.
public final class WebPushHTTPClient: WebPushClientProtocol, Service, Sendable {
    let transport: WebPushHTTP2Transport
    let credentials: Mutex<WebPushCredentials>
    private let allowList: WebPushHostAllowList
    private let logger: Logger
    private let metrics: WebPushClientMetrics

    /// Throws NIOSSL's error when the extra trust roots cannot be read. Request durations and
    /// the connections' GOAWAYs are recorded through `metricsFactory` (``WebPushClientMetrics``).
    public init(configuration: WebPushClientConfiguration, metricsFactory: any MetricsFactory = MetricsSystem.factory, logger: Logger) throws {
        let metrics = WebPushClientMetrics(factory: metricsFactory)
        transport = try Self.makeTransport(
            configuration: configuration, eventLoopGroup: MultiThreadedEventLoopGroup.singleton, countingGoAwaysIn: metrics.goAways, logger: logger)
        credentials = Mutex(configuration.credentials)
        allowList = configuration.allowList
        self.logger = logger
        self.metrics = metrics
    }

    /// Replaces the VAPID keys (a reload on SIGHUP): requests already signed finish with the key
    /// they had, later ones use the new entries. Returns whether any app's keys changed (an
    /// unchanged set keeps its signers and their cached tokens).
    @discardableResult
    public func updateCredentials(_ newCredentials: WebPushCredentials) -> Bool {
        credentials.withLock { credentials in
            guard !credentials.hasSameKeys(as: newCredentials) else { return false }
            credentials = newCredentials
            return true
        }
    }

    /// Runs the connections until cancelled or gracefully shut down, then stops them: requests
    /// still waiting for a stream fail with ``TransportError/shuttingDown(_:)``, those in flight
    /// get up to ``WebPushClientConfiguration/shutdownGracePeriod`` to finish and fail with a
    /// connection error after.
    public func run() async throws {
        await withDiscardingTaskGroup { group in
            group.addTask { await self.transport.run() }
            // Returns at a graceful shutdown, throws when cancelled: either way, stop.
            try? await gracefulShutdown()
            transport.shutDown()
        }
    }

    /// Checks, signs, encrypts and sends `request` on its origin's connections (see
    /// ``WebPushClientProtocol/send(_:deadline:)``); a stream the service never processed is
    /// sent again on another connection. Throws ``TransportError`` when no answer arrived.
    public func send(_ request: WebPushRequest, deadline: ContinuousClock.Instant) async throws -> WebPushResponse {
        let (origin, send) = try prepare(request, nowMilliseconds: WallClock.millisecondsSince1970())
        let sentAt = ContinuousClock.now
        let response: WebPushResponse
        do {
            response = try await transport.send(send, to: origin, deadline: deadline, precedence: request.precedence)
        } catch {
            if Task.isCancelled, ContinuousClock.now < deadline { throw CancellationError() }
            throw failure(error, sentAt: sentAt, deadline: deadline)
        }
        record(response, from: origin, sentAt: sentAt)
        return response
    }

    /// Records the connections open to push services and the streams in use
    /// (`herald_webpush_connections`, `herald_webpush_streams_in_use`).
    public func recordPoolState() {
        let usage = transport.usage
        metrics.recordUsage(connections: usage.connections, streamsInUse: usage.streamsInUse)
    }

    /// The origin `request` goes to and its HTTP/2 request at `nowMilliseconds` of the wall
    /// clock, in this order: the endpoint's host is allowed (else ``WebPushHostRefusedError``), a
    /// VAPID key serves the app and the subscription's key (else ``WebPushNoCredentialError``),
    /// the plaintext is encrypted for the subscription, the VAPID token is signed for its origin.
    func prepare(_ request: WebPushRequest, nowMilliseconds: Int64) throws -> (origin: WebPushOrigin, request: WebPushSendRequest) {
        let subscription = request.subscription
        guard let target = WebPushTarget(endpoint: subscription.endpoint) else { throw WebPushHostRefusedError(host: subscription.origin) }
        guard allowList.allows(host: target.origin.host) else { throw WebPushHostRefusedError(host: target.origin.host) }
        guard let signer = credentials.withLock({ $0.signer(app: request.app, publicKey: request.vapidPublicKey) }) else {
            throw WebPushNoCredentialError(app: request.app)
        }
        let body = try WebPushEncryption.encrypt(request.plaintext, to: subscription.keys)
        let authorization = try signer.authorization(origin: subscription.origin, nowSeconds: nowMilliseconds / 1000)
        let send = WebPushSendRequest(
            authority: target.origin.address.authority,
            path: target.path,
            body: body,
            ttl: request.ttl.headerSeconds(nowMilliseconds: nowMilliseconds),
            urgency: request.urgency,
            topic: request.topic,
            authorization: authorization
        )
        return (target.origin, send)
    }

    /// Records the duration of a request to `origin` sent at `sentAt` and logs the answer (trace level).
    func record(_ response: WebPushResponse, from origin: WebPushOrigin, sentAt: ContinuousClock.Instant) {
        metrics.request(duration: sentAt.duration(to: .now), answered: true)
        logger.trace(
            "Push service answered",
            metadata: ["webpush.origin": "\(origin.address)", "webpush.status": "\(response.status)", "webpush.reason": "\(response.reason ?? "")"]
        )
    }

    /// The error of a request sent at `sentAt` that got no answer, its duration recorded.
    func failure(_ error: any Error, sentAt: ContinuousClock.Instant, deadline: ContinuousClock.Instant) -> TransportError {
        metrics.request(duration: sentAt.duration(to: .now), answered: false)
        return TransportError.reading(error, deadlinePassed: ContinuousClock.now >= deadline)
    }
}
