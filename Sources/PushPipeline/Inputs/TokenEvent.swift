import JSONCore
public import PushCore
import APNSCore
public import PushStores
import FCMCore
public import WebPushCore

extension TokenRegistryUpdate {
    /// Validates a push.tokens value against the contract and normalises its token; a browser
    /// subscription's endpoint must be on a host `webPushHosts` allows.
    public init(json value: [UInt8]?, webPushHosts: WebPushHostAllowList = .standard) throws(InputRejection) {
        let fields = FieldReader(object: try JSONObjectDecoder.decode(value))
        let actionText = try fields.string("action", bytes: 1...32, required: true)!
        guard let action = Action(rawValue: actionText) else {
            throw InputRejection(.schemaViolation, "action must be register or unregister")
        }
        let userID = try fields.string("user_id", bytes: 1...256, required: action == .register)
        let topic = try fields.string("topic", bytes: 1...255, required: true)!
        let timestampText = try fields.string("timestamp", bytes: 1...64, required: true)!
        guard let timestamp = RFC3339.parse(timestampText) else {
            throw InputRejection(.schemaViolation, "timestamp must be RFC 3339 with Z or an offset")
        }
        let platformText = try fields.string("platform", bytes: 1...16, required: false) ?? DevicePlatform.apns.rawValue
        guard let platform = DevicePlatform(rawValue: platformText) else {
            throw InputRejection(.schemaViolation, "platform must be apns, fcm or webpush")
        }
        // A string that is not a token is `invalid_token`, whatever its length; a missing or
        // non-string token is a schema violation (a browser subscription names its endpoint).
        guard case .string(let rawToken)? = fields.object["token"] ?? (platform == .webpush ? .string("") : nil) else {
            throw InputRejection(.schemaViolation, "token is required and must be a string")
        }
        let environment = try fields.environment() ?? .production
        let targetText = try fields.string("fcm_target", bytes: 1...16, required: false)
        switch platform {
        case .apns:
            guard targetText == nil else { throw InputRejection(.schemaViolation, "fcm_target is for platform fcm only") }
            self.init(
                action: action,
                userID: userID,
                token: try DeviceTokenText.normalize(rawToken),
                topic: topic,
                environment: environment,
                timestamp: timestamp
            )
        case .fcm:
            guard environment == .production else { throw InputRejection(.schemaViolation, "an FCM device's environment is production") }
            // Kept exactly as the app got it: never lowercased, never checked by pattern.
            let target = try FCMTarget(registration: rawToken, kind: targetText)
            self.init(
                action: action,
                userID: userID,
                token: target.value,
                topic: topic,
                environment: .production,
                timestamp: timestamp,
                platform: .fcm,
                fcmTarget: FCMTargetKind(rawValue: target.kind) ?? .token
            )
        case .webpush:
            try self.init(subscription: fields, action: action, userID: userID, topic: topic, timestamp: timestamp, allowing: webPushHosts)
        }
    }

    /// A browser subscription's registration (`subscription`: `endpoint` and `keys`, as
    /// `PushSubscription.toJSON()` gives them; optional `vapid_public_key`, the application
    /// server key it was made with) or unregistration (`subscription.endpoint`, or `token`).
    private init(
        subscription fields: FieldReader,
        action: Action,
        userID: String?,
        topic: String,
        timestamp: Timestamp,
        allowing hosts: WebPushHostAllowList
    ) throws(InputRejection) {
        guard try fields.environment() ?? .production == .production else {
            throw InputRejection(.schemaViolation, "a browser subscription's environment is production")
        }
        let subscription = fields.object["subscription"].flatMap { $0 == .null ? nil : $0 }
        if let subscription {
            guard case .object = subscription else { throw InputRejection(.schemaViolation, "subscription must be a JSON object") }
        }
        guard let endpoint = subscription?["endpoint"]?.stringValue ?? (action == .unregister ? fields.object["token"]?.stringValue : nil) else {
            throw InputRejection(.schemaViolation, "a webpush registration needs subscription.endpoint (an unregistration may name token)")
        }
        var keys: WebPushKeys?
        if action == .register {
            let p256dh = subscription?["keys"]?["p256dh"]?.stringValue ?? ""
            let auth = subscription?["keys"]?["auth"]?.stringValue ?? ""
            do {
                _ = try WebPushSubscription(endpoint: endpoint, p256dh: p256dh, auth: auth, allowing: hosts)
            } catch {
                throw InputRejection(.invalidToken, error.description)
            }
            let vapidKey = try fields.string("vapid_public_key", bytes: 1...128, required: false)
            if let vapidKey, Base64URL.decode(vapidKey)?.count != 65 {
                throw InputRejection(.schemaViolation, "vapid_public_key must be base64url of an uncompressed P-256 point")
            }
            keys = WebPushKeys(p256dh: p256dh, auth: auth, vapidPublicKey: vapidKey)
        } else if !(1...WebPushSubscription.maximumEndpointBytes).contains(endpoint.utf8.count) {
            throw InputRejection(.invalidToken, "an endpoint must be 1..\(WebPushSubscription.maximumEndpointBytes) bytes")
        }
        self.init(
            action: action, userID: userID, token: endpoint, topic: topic, environment: .production, timestamp: timestamp,
            platform: .webpush, webPush: keys)
    }
}
