public import _CryptoExtras
import MockServerSupport

/// A service account the mock accepts: its project, `client_email` and the public half of its
/// key, against which the token endpoint verifies RS256 assertions. An account with several keys
/// at once (one being rotated) is listed once per key.
public struct MockFCMServiceAccount: Sendable {
    public var projectID: String
    public var clientEmail: String
    public var publicKey: _RSA.Signing.PublicKey

    public init(projectID: String, clientEmail: String, publicKey: _RSA.Signing.PublicKey) {
        self.projectID = projectID
        self.clientEmail = clientEmail
        self.publicKey = publicKey
    }
}

/// How a ``MockFCMServer`` listens, whom it trusts and which registration tokens it knows.
///
/// The defaults give a server on an ephemeral loopback port that accepts every well-formed
/// message sent with an access token it issued.
public struct MockFCMConfiguration: Sendable {
    /// The address to bind; also in the server certificate's subject alternative names.
    public var host: String = "127.0.0.1"
    /// The port to bind; `0` picks an ephemeral one (ask ``MockFCMServer/listeningPort()``).
    public var port: Int = 0
    /// Where to write the PEM of the generated CA, so clients can trust it; nil writes nothing.
    public var caCertificatePath: String?
    /// The accounts whose assertions the token endpoint (`POST /token`) accepts.
    public var serviceAccounts: [MockFCMServiceAccount]
    /// `expires_in` of the access tokens issued, in whole seconds (Google's: 3599).
    public var accessTokenLifetimeSeconds: Int = 3599
    /// The project whose access tokens the metadata server's token endpoint issues (the
    /// service account GKE's Workload Identity binds to the pod); nil: that endpoint answers 404.
    public var metadataServerProjectID: String?
    /// Registration tokens (or FIDs) that answer 404 UNREGISTERED.
    public var unregisteredTokens: Set<String> = []
    /// Registration tokens (or FIDs) that answer 400 INVALID_ARGUMENT as Google does today: an
    /// FcmError INVALID_ARGUMENT, the message "The registration token is not a valid FCM
    /// registration token" and no BadRequest detail.
    public var invalidTokens: Set<String> = []
    /// Registration tokens (or FIDs) that answer 400 INVALID_ARGUMENT in the older shape: an
    /// FcmError INVALID_ARGUMENT and a BadRequest field violation naming `message.token` (or
    /// `message.fid`).
    public var legacyInvalidTokens: Set<String> = []
    /// Registration tokens of another sender: 403 SENDER_ID_MISMATCH.
    public var senderMismatchTokens: Set<String> = []
    /// Registration tokens whose app's APNs or web push credential in Firebase is refused: 401
    /// UNAUTHENTICATED with the FcmError THIRD_PARTY_AUTH_ERROR.
    public var thirdPartyAuthErrorTokens: Set<String> = []
    /// As ``thirdPartyAuthErrorTokens``, with the older FcmError name APNS_AUTH_ERROR.
    public var apnsAuthErrorTokens: Set<String> = []
    /// Registration tokens that answer 500 with the canonical status UNKNOWN and no FcmError,
    /// every time: a sender retries them until its attempts run out.
    public var unknownErrorTokens: Set<String> = []
    /// Projects whose FCM API is "disabled": 403 PERMISSION_DENIED without FcmError.
    public var disabledProjects: Set<String> = []
    /// Access tokens accepted for a project (token -> project ID) without an exchange and without
    /// expiry, for benchmarks: a load generator such as h2load cannot run the OAuth flow. Empty by
    /// default; never use it where the token exchange is under test.
    public var staticAccessTokens: [String: String] = [:]
    /// Injected faults; none by default.
    public var faults: MockFCMFaults = .none
    /// How many messages ``MockFCMServer/receivedMessages()`` keeps (the most recent); 0 keeps none.
    public var requestLogLimit: Int = 10_000
    /// The server's wall clock in milliseconds since 1970, by which assertions, access tokens and
    /// spent quotas expire; a test stops or moves it instead of waiting.
    public var wallClockMilliseconds: @Sendable () -> Int64 = MockWallClock.millisecondsSince1970

    /// Creates a configuration; every other setting has the default documented on its property.
    public init(
        host: String = "127.0.0.1",
        port: Int = 0,
        caCertificatePath: String? = nil,
        serviceAccounts: [MockFCMServiceAccount],
        accessTokenLifetimeSeconds: Int = 3599,
        faults: MockFCMFaults = .none
    ) {
        self.host = host
        self.port = port
        self.caCertificatePath = caCertificatePath
        self.serviceAccounts = serviceAccounts
        self.accessTokenLifetimeSeconds = max(1, accessTokenLifetimeSeconds)
        self.faults = faults
    }
}

/// Faults a ``MockFCMServer`` injects at random; everything is off by default. A faulted
/// message is answered with its error and never counts as delivered.
public struct MockFCMFaults: Sendable, Hashable {
    /// Share of messages answered 429 QUOTA_EXCEEDED, drawn per message; 0...1.
    public var quotaExceededFraction: Double
    /// Share of messages answered 500 INTERNAL; 0...1.
    public var internalErrorFraction: Double
    /// Share of messages answered 503 UNAVAILABLE; 0...1.
    public var unavailableFraction: Double
    /// `Retry-After` (whole seconds) on 429 and 503 answers; nil sends none.
    public var retryAfterSeconds: Int?
    /// Time before each message is processed and answered (a stream the client resets
    /// meanwhile is never processed); nil adds none.
    public var latency: Duration?
    /// After this many messages on one connection the server sends GOAWAY (NO_ERROR) naming the
    /// highest stream opened so far, answers those streams and closes the connection; nil: never.
    public var goAwayAfterRequests: Int?
    /// Seed of the random draws, for reproducible runs; nil seeds randomly.
    public var seed: UInt64?

    /// No faults.
    public static let none = MockFCMFaults()

    /// Creates a fault set; every parameter defaults to "off". Fractions are clamped to 0...1.
    public init(
        quotaExceededFraction: Double = 0,
        internalErrorFraction: Double = 0,
        unavailableFraction: Double = 0,
        retryAfterSeconds: Int? = nil,
        latency: Duration? = nil,
        goAwayAfterRequests: Int? = nil,
        seed: UInt64? = nil
    ) {
        func clamped(_ value: Double) -> Double { value.isFinite ? min(max(value, 0), 1) : 0 }
        self.quotaExceededFraction = clamped(quotaExceededFraction)
        self.internalErrorFraction = clamped(internalErrorFraction)
        self.unavailableFraction = clamped(unavailableFraction)
        self.retryAfterSeconds = retryAfterSeconds.map { max(0, $0) }
        self.latency = latency
        self.goAwayAfterRequests = goAwayAfterRequests.map { max(1, $0) }
        self.seed = seed
    }
}

/// A fault scripted for the next message to one registration token (``MockFCMServer/script(token:_:)``).
public enum MockFCMScriptedFault: Sendable, Hashable {
    /// 429 QUOTA_EXCEEDED naming the project's quota, with `Retry-After` when given (seconds).
    case quotaExceeded(retryAfterSeconds: Int?)
    /// 429 QUOTA_EXCEEDED naming the device's quota, with `Retry-After` when given (seconds).
    case deviceQuotaExceeded(retryAfterSeconds: Int?)
    /// 500 INTERNAL.
    case internalError
    /// 503 UNAVAILABLE, with `Retry-After` when given (seconds).
    case unavailable(retryAfterSeconds: Int?)
    /// 401 UNAUTHENTICATED, as if the access token had expired (it is expired from then on).
    case expiredAccessToken
}
