public import FCMCore
public import PushCore

/// Which service account serves which Android packages.
///
/// Each entry lists its packages; a package no entry lists goes to ``fallback`` when set
/// (HERALD_FCM_SERVICE_ACCOUNT_PATH), otherwise the request fails with ``FCMNoCredentialError``.
public struct FCMCredentials: Sendable, Hashable {
    /// A service account and the packages it serves.
    public struct Entry: Sendable, Hashable {
        public var packages: [String]
        public var serviceAccount: FCMServiceAccount

        public init(packages: [String], serviceAccount: FCMServiceAccount) {
            self.packages = packages
            self.serviceAccount = serviceAccount
        }
    }

    public var entries: [Entry]
    public var fallback: FCMServiceAccount?

    public init(entries: [Entry] = [], fallback: FCMServiceAccount? = nil) {
        self.entries = entries
        self.fallback = fallback
    }

    /// The account that serves `package`: the first entry listing it, else the fallback.
    public func serviceAccount(for package: String) -> FCMServiceAccount? {
        entries.first { $0.packages.contains(package) }?.serviceAccount ?? fallback
    }

    /// Every distinct account, by project: one access token per project.
    public var accountsByProject: [String: FCMServiceAccount] {
        var accounts: [String: FCMServiceAccount] = [:]
        for account in entries.map(\.serviceAccount) + (fallback.map { [$0] } ?? []) where accounts[account.projectID] == nil {
            accounts[account.projectID] = account
        }
        return accounts
    }
}

/// How an ``FCMHTTPClient`` reaches FCM and its token endpoint.
public struct FCMClientConfiguration: Sendable {
    /// Google's FCM host, the base URL when none is configured.
    public static let defaultBaseURL = "https://fcm.googleapis.com"
    /// FCM's base URL (HERALD_FCM_URL); the send path `/v1/projects/<id>/messages:send` follows it.
    public var baseURL: String = defaultBaseURL
    public var credentials: FCMCredentials
    /// The key file the fallback account was read from (HERALD_FCM_SERVICE_ACCOUNT_PATH), which a
    /// credentials reload (SIGHUP) reads again; nil when it was given another way.
    public var fallbackPath: String?
    /// A PEM bundle of extra trusted roots for FCM and the token endpoint (HERALD_FCM_CA_PATH).
    public var additionalTrustRootsPEMPath: String?
    /// How long before an access token expires it is refreshed in the background (Google's
    /// tokens live an hour). A short-lived token is refreshed at half its life at the latest.
    public var tokenRefreshMargin: Duration = .seconds(300)
    /// The wait between failed token exchanges (jittered, at least half the ceiling).
    public var tokenRetryBackoff = Backoff(initial: .seconds(1), maximum: .seconds(60), floorPercent: 50)
    /// The longest a token exchange may take.
    public var tokenRequestTimeout: Duration = .seconds(10)
    /// The longest a new connection (TCP and TLS) may take.
    public var connectTimeout: Duration = .seconds(10)
    /// The largest answer body read; a longer one is cut off and read as no body.
    public var maximumResponseBytes = 64 * 1024
    /// The most HTTP/2 connections to FCM (HERALD_FCM_CONNECTIONS); each carries as many
    /// requests at once as FCM's SETTINGS_MAX_CONCURRENT_STREAMS allows (100 on Google's servers).
    public var connections = defaultConnections
    /// Two, as for APNs: one connection's 100 streams held the mixed benchmark's Android half to
    /// waiting for streams (BENCHMARKS.md).
    public static let defaultConnections = 2
    /// The most requests that wait for a stream; more fail at once (as if their deadline passed).
    public var maximumQueuedRequests = 100_000
    /// A PING is sent after this long without a frame from FCM.
    public var pingInterval: Duration = .seconds(60)
    /// A connection whose PING is not acknowledged within this is closed.
    public var pingTimeout: Duration = .seconds(20)
    /// After ``FCMHTTPClient/run()`` was asked to stop, how long requests in flight may still finish.
    public var shutdownGracePeriod: Duration = .seconds(5)

    /// Creates a configuration; every other setting has the default documented on its property.
    public init(baseURL: String = defaultBaseURL, credentials: FCMCredentials, additionalTrustRootsPEMPath: String? = nil) {
        self.baseURL = baseURL.hasSuffix("/") ? String(baseURL.dropLast()) : baseURL
        self.credentials = credentials
        self.additionalTrustRootsPEMPath = additionalTrustRootsPEMPath
    }
}
