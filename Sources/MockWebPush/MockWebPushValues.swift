/// A subscription the mock made, as `PushSubscription.toJSON()` hands it to a web app: where to
/// POST and the keys to encrypt to. The mock keeps the private half of `p256dh`.
public struct MockWebPushSubscription: Sendable, Hashable {
    /// `https://<host>:<port>/push/<id>`.
    public var endpoint: String
    /// The user agent's public key: base64url of the uncompressed P-256 point.
    public var p256dh: String
    /// The authentication secret: base64url of 16 bytes.
    public var auth: String
    /// The VAPID public key (base64url) the subscription is bound to; nil accepts any key.
    public var applicationServerKey: String?

    /// A subscription as read from `POST /subscribe`'s answer.
    public init(endpoint: String, p256dh: String, auth: String, applicationServerKey: String? = nil) {
        self.endpoint = endpoint
        self.p256dh = p256dh
        self.auth = auth
        self.applicationServerKey = applicationServerKey
    }
}

/// An answer scripted for the next request to one endpoint (``MockWebPushServer/script(endpoint:answers:)``),
/// given once the request passed every check; it is not a delivery.
public enum MockWebPushAnswer: Sendable, Hashable {
    /// This status (429, 500, 502, 503, 504...), with `Retry-After` in seconds when given.
    case status(Int, retryAfterSeconds: Int? = nil)
    /// 410: the subscription is gone, for this request and every later one.
    case gone
    /// 404 for this request only.
    case notFound
}

/// One message the mock accepted (201), as the service worker would receive it.
public struct MockWebPushDelivery: Sendable, Hashable {
    /// The subscription's endpoint.
    public var endpoint: String
    /// The decrypted message, padding removed.
    public var plaintext: [UInt8]
    /// The `TTL` header, in seconds.
    public var ttl: Int
    /// The `Urgency` header, when sent.
    public var urgency: String?
    /// The `Topic` header, when sent.
    public var topic: String?
    /// The VAPID token's `sub` claim.
    public var vapidSubject: String
    /// The VAPID token's `aud` claim (the origin it was sent to).
    public var vapidAudience: String
    /// The origin that received it, `https://<host>:<port>`.
    public var origin: String
}

/// The mock's counters; push requests only (`/subscribe` and `/stats` are the mock's own).
public struct MockWebPushStats: Sendable, Hashable {
    /// Requests to push endpoints, whatever the answer.
    public var requests: Int
    /// Messages accepted (201).
    public var deliveries: Int
    /// Answers to push requests by HTTP status.
    public var answersByStatus: [Int: Int]
    /// Messages accepted by endpoint.
    public var deliveriesByEndpoint: [String: Int]
    /// Connections accepted by origin.
    public var connectionsByOrigin: [String: Int]
}
