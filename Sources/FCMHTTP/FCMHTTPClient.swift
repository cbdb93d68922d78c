import HTTP2TLS
import PushCore
import AsyncHTTPClient
public import FCMCore
import Foundation
public import Logging
public import Metrics
import NIOCore
import NIOPosix
import NIOSSL
public import ServiceLifecycle
import Synchronization
import HTTP2Transport

/// Sends FCM HTTP v1 messages over HTTP/2 (``FCMHTTP2Transport``: APNs' frame code and pool,
/// one connection by default carrying as many streams as FCM allows), with an OAuth access token
/// per Firebase project.
///
/// Every request has a deadline; after a 401 UNAUTHENTICATED the token is refreshed and the
/// message sent once more. ``run()`` runs the connections and the background token refresh and,
/// when it ends, shuts both down: run it (in a `ServiceGroup`) for as long as messages are sent.
public final class FCMHTTPClient: FCMClientProtocol, Service, Sendable {
    /// The token source: readiness and refresh state.
    public let tokens: FCMAccessTokenSource
    /// The OAuth token exchange's client (AsyncHTTPClient: one request per project an hour).
    private let httpClient: HTTPClient
    let transport: FCMHTTP2Transport
    /// The path every send's path starts with: the base URL's own path, if any.
    let pathPrefix: String
    let credentials: Mutex<FCMCredentials>
    private let logger: Logger
    private let metrics: FCMClientMetrics

    /// Reads every service account's key; throws ``FCMServiceAccountError`` when one is not
    /// usable, ``FCMConfigurationError`` for a base URL that is not `https://host[:port][/path]`
    /// and NIOSSL's error when the extra trust roots cannot be read. Token exchanges and
    /// request durations are recorded through `metricsFactory` (``FCMClientMetrics``).
    public convenience init(configuration: FCMClientConfiguration, metricsFactory: any MetricsFactory = MetricsSystem.factory, logger: Logger) throws {
        try self.init(configuration: configuration, metricsFactory: metricsFactory, tokenClock: ContinuousTokenSourceClock(), logger: logger)
    }

    /// As the public initialiser, with access tokens that expire and are refreshed by `tokenClock`.
    package init(
        configuration: FCMClientConfiguration,
        metricsFactory: any MetricsFactory,
        tokenClock: any TokenSourceClock,
        logger: Logger
    ) throws {
        let metrics = FCMClientMetrics(factory: metricsFactory)
        let (transport, pathPrefix) = try Self.makeTransport(
            configuration: configuration, eventLoopGroup: MultiThreadedEventLoopGroup.singleton, countingGoAwaysIn: metrics.goAways, logger: logger)
        var tls = TLSConfiguration.makeClientConfiguration()
        if let path = configuration.additionalTrustRootsPEMPath {
            tls.additionalTrustRoots = [.certificates(try NIOSSLCertificate.fromPEMFile(path))]
        }
        let httpClient = HTTPClient(
            eventLoopGroup: MultiThreadedEventLoopGroup.singleton,
            configuration: HTTPClient.Configuration(
                tlsConfiguration: tls,
                redirectConfiguration: .disallow,
                timeout: HTTPClient.Configuration.Timeout(connect: TimeAmount(configuration.connectTimeout)),
                decompression: .disabled
            )
        )
        do {
            self.tokens = try FCMAccessTokenSource(
                configuration: configuration, httpClient: httpClient, metrics: metrics, clock: tokenClock, logger: logger)
        } catch {
            try? httpClient.syncShutdown()
            throw error
        }
        self.httpClient = httpClient
        self.transport = transport
        self.pathPrefix = pathPrefix
        self.credentials = Mutex(configuration.credentials)
        self.logger = logger
        self.metrics = metrics
    }

    /// True when every configured project has a valid access token.
    public var isReady: Bool { tokens.isReady }

    /// Replaces the credentials (a reload on SIGHUP): requests already sent finish with the
    /// token they had, later ones use the new accounts. Throws, changing nothing, when a key is
    /// not usable.
    public func updateCredentials(_ newCredentials: FCMCredentials) throws(FCMServiceAccountError) {
        try tokens.update(newCredentials)
        credentials.withLock { $0 = newCredentials }
    }

    /// Runs the connections and the token refresh until cancelled or gracefully shut down, then
    /// stops both: requests still waiting for a stream fail with
    /// ``TransportError/shuttingDown(_:)``, those in flight get up to
    /// ``FCMClientConfiguration/shutdownGracePeriod`` to finish and fail with a connection error after.
    public func run() async throws {
        await withDiscardingTaskGroup { group in
            group.addTask { await self.transport.run() }
            try? await tokens.run()
            transport.shutDown()
        }
        try await httpClient.shutdown()
    }

    public func send(_ request: FCMRequest, deadline: ContinuousClock.Instant) async throws -> FCMResponse {
        try await send(request, deadline: deadline, refreshed: false)
    }

    /// Records the connections open to FCM and the streams in use (`herald_fcm_connections`,
    /// `herald_fcm_streams_in_use`).
    public func recordPoolState() {
        let usage = transport.usage
        metrics.recordUsage(connections: usage.connections, streamsInUse: usage.streamsInUse)
    }

    public func project(servingPackage package: String) -> String? {
        credentials.withLock { $0.serviceAccount(for: package)?.projectID }
    }

    /// ``send(_:deadline:)``; `refreshed`: the access token was already refreshed once for this
    /// request, so a 401 UNAUTHENTICATED is final.
    func send(_ request: FCMRequest, deadline: ContinuousClock.Instant, refreshed: Bool) async throws -> FCMResponse {
        guard let account = credentials.withLock({ $0.serviceAccount(for: request.package) }) else {
            throw FCMNoCredentialError(package: request.package)
        }
        let path = sendPath(projectID: account.projectID)
        var refreshed = refreshed
        while true {
            let token = try await tokens.accessToken(projectID: account.projectID, deadline: deadline)
            let send = sendRequest(request, path: path, token: token, nowMilliseconds: WallClock.millisecondsSince1970())
            let sentAt = ContinuousClock.now
            var response: FCMResponse
            do {
                response = self.response(to: try await transport.send(send, to: .sole, deadline: deadline, precedence: request.precedence), sentAt: sentAt)
            } catch {
                if Task.isCancelled, ContinuousClock.now < deadline { throw CancellationError() }
                throw failure(error, sentAt: sentAt, deadline: deadline)
            }
            response.accessTokenRefreshed = refreshed
            guard response.decision == .refreshAccessToken else {
                logAnswer(response, to: request)
                return response
            }
            tokens.invalidate(token, projectID: account.projectID)
            refreshed = true
        }
    }

    /// The path of the send endpoint of `projectID`.
    func sendPath(projectID: String) -> String {
        "\(pathPrefix)/v1/projects/\(projectID)/messages:send"
    }

    /// The HTTP/2 request that sends `request` to `path` with `token`, its TTL counted from
    /// `nowMilliseconds` of the wall clock.
    func sendRequest(_ request: FCMRequest, path: String, token: FCMAccessTokenSource.AccessToken, nowMilliseconds: Int64) -> FCMSendRequest {
        FCMSendRequest(path: path, authorization: "Bearer " + token.value, body: request.body(nowMilliseconds: nowMilliseconds))
    }

    /// FCM's answer to a request sent at `sentAt`, its duration recorded.
    func response(to answer: FCMSendAnswer, sentAt: ContinuousClock.Instant) -> FCMResponse {
        metrics.request(duration: sentAt.duration(to: .now), answered: true)
        return FCMResponse(
            status: answer.status,
            body: answer.body.readableBytesView,
            retryAfterHeader: answer.retryAfter,
            nowMilliseconds: WallClock.millisecondsSince1970()
        )
    }

    /// The error of a request sent at `sentAt` that got no answer, its duration recorded.
    func failure(_ error: any Error, sentAt: ContinuousClock.Instant, deadline: ContinuousClock.Instant) -> TransportError {
        metrics.request(duration: sentAt.duration(to: .now), answered: false)
        return TransportError.reading(error, deadlinePassed: ContinuousClock.now >= deadline)
    }

    /// Logs FCM's answer to `request` (trace level).
    func logAnswer(_ response: FCMResponse, to request: FCMRequest) {
        logger.trace(
            "FCM answered",
            metadata: [
                "fcm.target": "\(request.target.redacted)", "fcm.status": "\(response.status)", "fcm.reason": "\(response.reason ?? "")",
            ]
        )
    }
}
