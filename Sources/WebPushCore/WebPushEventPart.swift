public import JSONCore
public import PushCore

/// An event's `webpush` part, validated: the web app and what every subscription of its users
/// receives, with the event's `priority`, `expiration` and `collapse_id` applied once.
public struct WebPushEventPart: Sendable, Hashable {
    /// The web app (the registry's `topic` for its subscriptions).
    public var app: String
    /// What the service worker receives: `message` as given when it is a string, else its JSON.
    public var plaintext: [UInt8]
    public var ttl: WebPushTTL
    public var urgency: WebPushUrgency?
    /// The hashed `Topic` of the event's `collapse_id`.
    public var topic: String?

    /// Validates `{"app", "message", "ttl_s", "urgency"}`: `ttl_s` wins over `expiration` (UNIX
    /// seconds; 0 = deliver now or drop), which wins over four weeks; `urgency` over the one
    /// `priority` (1, 5 or 10) stands for.
    public init(json webpush: JSONValue, priority: Int?, expiration: Int64?, collapseID: String?) throws(InputRejection) {
        guard case .object = webpush else { throw InputRejection(.schemaViolation, "webpush must be a JSON object") }
        guard let app = webpush["app"]?.stringValue, (1...255).contains(app.utf8.count),
            !app.unicodeScalars.contains(where: { $0.value < 0x21 || $0.value == 0x7F })
        else {
            throw InputRejection(.schemaViolation, "webpush.app must be 1..255 bytes without spaces or control characters")
        }
        guard let message = webpush["message"], message != .null else {
            throw InputRejection(.schemaViolation, "webpush.message is required")
        }
        let plaintext = message.stringValue.map { Array($0.utf8) } ?? message.serialized()
        guard plaintext.count <= WebPushEncryption.maximumPlaintextBytes else {
            throw InputRejection(
                .payloadTooLarge,
                "webpush.message is \(plaintext.count) bytes; one encrypted record carries at most \(WebPushEncryption.maximumPlaintextBytes)")
        }
        switch webpush["ttl_s"] {
        case nil, .null?:
            ttl = expiration.map { .until($0) } ?? .seconds(WebPushTTL.defaultSeconds)
        case .number(let text)?:
            guard let seconds = Int64(text), (0...WebPushTTL.defaultSeconds).contains(seconds) else {
                throw InputRejection(.schemaViolation, "webpush.ttl_s must be a whole number of seconds, 0..\(WebPushTTL.defaultSeconds)")
            }
            ttl = .seconds(seconds)
        default:
            throw InputRejection(.schemaViolation, "webpush.ttl_s must be a whole number of seconds")
        }
        switch webpush["urgency"] {
        case nil, .null?:
            urgency = priority.flatMap(WebPushUrgency.init(apnsPriority:))
        case .string(let text)?:
            guard let urgency = WebPushUrgency(rawValue: text) else {
                throw InputRejection(.schemaViolation, "webpush.urgency must be very-low, low, normal or high")
            }
            self.urgency = urgency
        default:
            throw InputRejection(.schemaViolation, "webpush.urgency must be very-low, low, normal or high")
        }
        self.app = app
        self.plaintext = plaintext
        topic = collapseID.map(WebPushTopic.hashing)
    }

    /// The request for one subscription of the app.
    public func request(to subscription: WebPushSubscription, vapidPublicKey: String?, precedence: StreamPrecedence) -> WebPushRequest {
        WebPushRequest(
            app: app, subscription: subscription, vapidPublicKey: vapidPublicKey, plaintext: plaintext, ttl: ttl, urgency: urgency,
            topic: topic, precedence: precedence)
    }
}
