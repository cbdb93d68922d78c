import APNSCore
import AsyncHTTPClient
public import FCMCore
import Foundation
public import Logging
public import Metrics
import NIOCore
import NIOHTTP1
import NIOPosix
import NIOSSL
public import ServiceLifecycle
import Synchronization

/// Sends FCM HTTP v1 messages over HTTP/2 (AsyncHTTPClient's pool: one multiplexed connection
/// per host, as many streams as FCM allows), with an OAuth access token per Firebase project.
///
/// Every request has a deadline; after a 401 UNAUTHENTICATED the token is refreshed and the
/// message sent once more. ``run()`` runs the background token refresh and, when it ends, shuts
/// the HTTP client down: run it (in a `ServiceGroup`) for as long as messages are sent.
public final class FCMHTTPClient: FCMClientProtocol, Service, Sendable {
    /// The token source: readiness and refresh state.
    public let tokens: FCMAccessTokenSource
    private let httpClient: HTTPClient
    private let credentials: Mutex<FCMCredentials>
    private let configuration: FCMClientConfiguration
    private let logger: Logger
    private let metrics: FCMClientMetrics

    /// Reads every service account's key; throws ``FCMServiceAccountError`` when one is not
    /// usable and NIOSSL's error when the extra trust roots cannot be read. Token exchanges and
    /// request durations are recorded through `metricsFactory` (``FCMClientMetrics``).
    public init(configuration: FCMClientConfiguration, metricsFactory: any MetricsFactory = MetricsSystem.factory, logger: Logger) throws {
        var tls = TLSConfiguration.makeClientConfiguration()
        if let path = configuration.additionalTrustRootsPEMPath {
            tls.additionalTrustRoots = [.certificates(try NIOSSLCertificate.fromPEMFile(path))]
        }
        var clientConfiguration = HTTPClient.Configuration(
            tlsConfiguration: tls,
            redirectConfiguration: .disallow,
            timeout: HTTPClient.Configuration.Timeout(connect: TimeAmount(configuration.connectTimeout)),
            decompression: .disabled
        )
        clientConfiguration.httpVersion = .automatic
        let httpClient = HTTPClient(eventLoopGroup: MultiThreadedEventLoopGroup.singleton, configuration: clientConfiguration)
        let metrics = FCMClientMetrics(factory: metricsFactory)
        do {
            self.tokens = try FCMAccessTokenSource(configuration: configuration, httpClient: httpClient, metrics: metrics, logger: logger)
        } catch {
            try? httpClient.syncShutdown()
            throw error
        }
        self.httpClient = httpClient
        self.credentials = Mutex(configuration.credentials)
        self.configuration = configuration
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

    /// Runs the token refresh until cancelled or gracefully shut down, then shuts the HTTP
    /// client down (requests still in flight fail with ``FCMTransportError/shuttingDown(_:)``
    /// or a connection error).
    public func run() async throws {
        try? await tokens.run()
        try await httpClient.shutdown()
    }

    public func send(_ request: FCMRequest, deadline: ContinuousClock.Instant) async throws -> FCMResponse {
        guard let account = credentials.withLock({ $0.serviceAccount(for: request.package) }) else {
            throw FCMNoCredentialError(package: request.package)
        }
        let url = "\(configuration.baseURL)/v1/projects/\(account.projectID)/messages:send"
        var refreshed = false
        while true {
            let token = try await tokens.accessToken(projectID: account.projectID, deadline: deadline)
            var response = try await post(request, url: url, token: token, deadline: deadline)
            response.accessTokenRefreshed = refreshed
            guard response.decision == .refreshAccessToken else {
                logger.trace(
                    "FCM answered",
                    metadata: [
                        "fcm.target": "\(request.target.redacted)", "fcm.status": "\(response.status)",
                        "fcm.reason": "\(response.reason ?? "")",
                    ]
                )
                return response
            }
            tokens.invalidate(token, projectID: account.projectID)
            refreshed = true
        }
    }

    private func post(
        _ request: FCMRequest,
        url: String,
        token: FCMAccessTokenSource.AccessToken,
        deadline: ContinuousClock.Instant
    ) async throws -> FCMResponse {
        var post = HTTPClientRequest(url: url)
        post.method = .POST
        post.headers.add(name: "authorization", value: "Bearer \(token.value)")
        post.headers.add(name: "content-type", value: "application/json; charset=utf-8")
        post.body = .bytes(ByteBuffer(bytes: request.body(nowMilliseconds: WallClock.millisecondsSince1970())))
        let left = ContinuousClock.now.duration(to: deadline)
        guard left > .zero else { throw FCMTransportError.deadlineExceeded("the deadline passed before the request") }
        let sentAt = ContinuousClock.now
        do {
            let answer = try await httpClient.execute(post, deadline: .now() + TimeAmount(left), logger: logger)
            let body: ByteBuffer
            do {
                body = try await answer.body.collect(upTo: configuration.maximumResponseBytes)
            } catch let error as NIOTooManyBytesError {
                _ = error
                body = ByteBuffer()
            }
            metrics.request(duration: sentAt.duration(to: .now), answered: true)
            return FCMResponse(
                status: Int(answer.status.code),
                body: body.readableBytesView,
                retryAfterHeader: answer.headers.first(name: "retry-after"),
                nowMilliseconds: WallClock.millisecondsSince1970()
            )
        } catch {
            metrics.request(duration: sentAt.duration(to: .now), answered: false)
            if Task.isCancelled, ContinuousClock.now < deadline { throw CancellationError() }
            throw FCMTransportErrors.map(error, deadlinePassed: ContinuousClock.now >= deadline)
        }
    }
}
