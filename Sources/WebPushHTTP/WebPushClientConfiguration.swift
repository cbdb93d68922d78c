// WebPushClientConfiguration.swift: how a `WebPushHTTPClient` signs, which push-service hosts it
// may reach, and its connections' settings.

public import WebPushCore

/// How a ``WebPushHTTPClient`` reaches browsers' push services.
public struct WebPushClientConfiguration: Sendable {
    /// The VAPID keys by web app (the credentials file's entries and
    /// HERALD_WEBPUSH_VAPID_KEY_PATH's fallback); replaced on reload with
    /// ``WebPushHTTPClient/updateCredentials(_:)``.
    public var credentials: WebPushCredentials
    /// The hosts messages may go to (HERALD_WEBPUSH_ALLOWED_HOSTS); every other endpoint is
    /// refused before any connection.
    public var allowList: WebPushHostAllowList = .standard
    /// A PEM bundle of extra trusted roots for push services (HERALD_WEBPUSH_CA_PATH).
    public var additionalTrustRootsPEMPath: String?
    /// The most HTTP/2 connections to one origin (HERALD_WEBPUSH_CONNECTIONS_PER_HOST), opened
    /// as requests need them; each carries as many requests at once as the service's
    /// SETTINGS_MAX_CONCURRENT_STREAMS allows.
    public var connectionsPerOrigin = defaultConnectionsPerOrigin
    /// Two, as for APNs and FCM.
    public static let defaultConnectionsPerOrigin = 2
    /// The most requests that wait for a stream of one origin; more fail at once (as if their
    /// deadline passed).
    public var maximumQueuedRequests = 100_000
    /// The longest a new connection (TCP and TLS) may take.
    public var connectTimeout: Duration = .seconds(10)
    /// The largest answer body read; a longer one is cut off and read as no body. Push
    /// services answer with a `Location` header and at most a short JSON error.
    public var maximumResponseBytes = 1024
    /// A PING is sent after this long without a frame from the push service.
    public var pingInterval: Duration = .seconds(60)
    /// A connection whose PING is not acknowledged within this is closed.
    public var pingTimeout: Duration = .seconds(20)
    /// After ``WebPushHTTPClient/run()`` was asked to stop, how long requests in flight may still finish.
    public var shutdownGracePeriod: Duration = .seconds(5)

    /// Creates a configuration; every other setting has the default documented on its property.
    public init(credentials: WebPushCredentials, allowList: WebPushHostAllowList = .standard, additionalTrustRootsPEMPath: String? = nil) {
        self.credentials = credentials
        self.allowList = allowList
        self.additionalTrustRootsPEMPath = additionalTrustRootsPEMPath
    }
}
