public import PushCore
import Crypto

/// One message to one browser subscription, as the pipeline hands it to a client: the
/// plaintext the service worker receives and the headers of RFC 8030. The client encrypts it
/// (a fresh key and salt per attempt) and signs the VAPID token.
public struct WebPushRequest: Sendable, Hashable {
    /// The web app (the registry's topic): whose VAPID key signs the request.
    public var app: String
    public var subscription: WebPushSubscription
    /// The VAPID public key (base64url) the subscription was made with; nil: the app's current key.
    public var vapidPublicKey: String?
    /// What the service worker receives, before encryption.
    public var plaintext: [UInt8]
    /// How long the push service keeps the message for an offline browser.
    public var ttl: WebPushTTL
    public var urgency: WebPushUrgency?
    /// The `Topic` header (already hashed, ``WebPushTopic``): a newer message replaces an
    /// undelivered one with the same topic.
    public var topic: String?
    /// Whether the request goes before bulk ones waiting for a stream.
    public var precedence: StreamPrecedence

    public init(
        app: String,
        subscription: WebPushSubscription,
        vapidPublicKey: String? = nil,
        plaintext: [UInt8],
        ttl: WebPushTTL = .seconds(WebPushTTL.defaultSeconds),
        urgency: WebPushUrgency? = nil,
        topic: String? = nil,
        precedence: StreamPrecedence = .urgent
    ) {
        self.app = app
        self.subscription = subscription
        self.vapidPublicKey = vapidPublicKey
        self.plaintext = plaintext
        self.ttl = ttl
        self.urgency = urgency
        self.topic = topic
        self.precedence = precedence
    }

    /// When the notification expires (UNIX seconds), for an expiry-bound TTL; nil otherwise.
    public var expiration: Int64? {
        if case .until(let seconds) = ttl { seconds } else { nil }
    }
}

/// The `TTL` header's source: a fixed number of seconds, or what is left until an absolute
/// expiry decided once per message (the header then shrinks with each retry).
public enum WebPushTTL: Sendable, Hashable {
    /// The event's `webpush.ttl_s`, or the default.
    case seconds(Int64)
    /// The event's `expiration` (UNIX seconds).
    case until(Int64)

    /// Four weeks: the most any push service keeps a message.
    public static let defaultSeconds: Int64 = 2_419_200

    /// The header's value at `nowMilliseconds` of the wall clock: never negative, at most four weeks.
    public func headerSeconds(nowMilliseconds: Int64) -> Int64 {
        switch self {
        case .seconds(let seconds): min(max(seconds, 0), Self.defaultSeconds)
        case .until(let expiration): min(max(expiration - nowMilliseconds / 1000, 0), Self.defaultSeconds)
        }
    }
}

/// RFC 8030's `Urgency`: how soon a battery-conscious browser should be woken.
public enum WebPushUrgency: String, Sendable, Hashable, CaseIterable {
    case veryLow = "very-low"
    case low
    case normal
    case high

    /// The urgency APNs' `priority` stands for when an event sets none: 10 high, 5 normal, 1 low.
    public init?(apnsPriority: Int) {
        switch apnsPriority {
        case 10: self = .high
        case 5: self = .normal
        case 1: self = .low
        default: return nil
        }
    }
}

/// The `Topic` header for an event's `collapse_id`: SHA-256, the first 24 bytes in base64url
/// (32 characters, the most RFC 8030 allows), so the push service never sees the id itself.
public enum WebPushTopic {
    public static func hashing(_ collapseID: String) -> String {
        Base64URL.encode(SHA256.hash(data: Array(collapseID.utf8)).prefix(24))
    }
}
